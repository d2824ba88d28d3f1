"""Tiny VLAs in bf16 (frozen weights bf16, LoRA adapters and heads float32 master weights) on the real runtime:
rollout and update in bf16, the weight sync after every update, checkpoints, and a resume that goes on bit for bit;
OpenVLA-OFT with its actor sharded over two processes (``actor.backend=fsdp``).
Before weights left workers as tensors of their own dtype, the first weight sync raised ``TypeError`` (numpy has no
bf16)."""

import json
import shutil

import pytest
import torch

from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.utils.checkpoint import load_checkpoint

BF16_RUN = ["deterministic=true", "env.obs_mode=rgb", "env.num_workers=1", "env.envs_per_worker=2",
            "policy.options.action_chunk=4", "policy.options.dtype=bfloat16", "policy.options.lora_rank=4",
            "rollout.steps_per_iteration=16", "env.max_episode_steps=16", "total_env_steps=96",
            "algorithm.num_minibatches=2", "algorithm.update_epochs=1", "eval.num_episodes=1",
            "eval.every_iterations=0", "checkpoint.every_iterations=1", "checkpoint.keep_last=10", "seed=3"]


def _rows(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k.split("/")[0] == "train"} for r in rows if "train/iteration" in r]


@pytest.mark.slow
@pytest.mark.parametrize("policy, algorithm", [
    # sharded over 2 actor processes (FSDP2 over gloo): every call on the actor is collective, rank 0 sends
    ("openvla_oft", ["algorithm.name=ppo", "algorithm.ratio_level=token", "actor.micro_batch_size=4",
                     "actor.backend=fsdp", "actor.world_size=2"]),
    ("pi0", ["algorithm.name=grpo", "algorithm.group_size=2", "algorithm.score=return"]),
])
def test_a_bf16_vla_trains_syncs_checkpoints_and_resumes_bit_for_bit(cluster, tmp_path, policy, algorithm):
    overrides = [*BF16_RUN, f"policy.name={policy}", *algorithm]
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    EmbodiedRunner(load_train_config("maniskill_pushcube", None, overrides), whole).run()
    rows = _rows(whole)
    assert [r["train/iteration"] for r in rows] == [1, 2, 3]
    assert all(r["train/gradient_steps"] > 0 and r["train/policy_version"] == i for i, r in enumerate(rows, 1))

    final = load_checkpoint(whole / "checkpoints" / "iter_000003").weights
    dtypes = {v.dtype for v in final.values() if v.is_floating_point()}
    assert dtypes == {torch.bfloat16, torch.float32}  # frozen base in bf16, adapters and heads in float32
    first = load_checkpoint(whole / "checkpoints" / "iter_000001").weights
    moved = [k for k, v in final.items() if v.is_floating_point() and not torch.equal(v, first[k])]
    assert moved and all(final[k].dtype == torch.float32 for k in moved)  # training moved the float32 masters

    shutil.copytree(whole, resumed)
    shutil.rmtree(resumed / "checkpoints" / "iter_000003")
    checkpoint = load_checkpoint(resumed)
    assert checkpoint.counters["iteration"] == 2
    EmbodiedRunner(load_train_config("maniskill_pushcube", None, overrides), resumed, checkpoint).run()
    assert _rows(resumed) == rows
    again = load_checkpoint(resumed / "checkpoints" / "iter_000003").weights
    assert all(torch.equal(again[k], v) for k, v in final.items())
