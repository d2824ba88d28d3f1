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
    # heavy (CI time): sharding is tested in test_workers_sharded_actor.py, bf16 by the pi0 case below
    pytest.param("openvla_oft", ["algorithm.name=ppo", "algorithm.ratio_level=token", "actor.micro_batch_size=4",
                                 "actor.backend=fsdp", "actor.world_size=2"], marks=pytest.mark.heavy),
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


@pytest.mark.parametrize("policy", ["openvla_oft", "pi0"])
def test_sft_of_a_bf16_vla_moves_its_float32_masters_and_hands_them_to_rl(policy):
    """The SFT stage in bf16 (the actor worker as the run builds it, without Ray): the loss falls, only float32
    master weights move (the frozen bf16 base stays bit for bit), and its weights, as the RL stage's actor loads
    them (``init_from``), act exactly as the SFT actor's policy does."""
    import numpy as np

    import embodied_rl.models.pi0  # noqa: F401  (registers pi0)
    from embodied_rl.algorithms.embodied.sft import SFTConfig
    from embodied_rl.algorithms.embodied.grpo import GroupConfig
    from embodied_rl.workers.actor_worker import ActorWorker
    from tests.models.openvla.openvla_helpers import ACTION_DIM, SHAPES, make_obs
    from tests.tests_helpers import ListChannel

    spec = dict(name=policy, obs_dim=5, action_dim=ACTION_DIM, hidden_sizes=[32], obs_shapes=SHAPES, action_chunk=2,
                lora_rank=4, dtype="bfloat16")
    torch.set_num_threads(1)
    sft = ActorWorker(policy=spec, algorithm=SFTConfig(batch_size=8, gradient_steps=60, lr=3e-3),
                      channel=ListChannel(), seed=1, group="actor", rank=0, world_size=1)
    obs = make_obs(8)
    arrays = {k: v.numpy() if torch.is_tensor(v) else v for k, v in obs.items()}
    targets = np.random.default_rng(0).uniform(-0.8, 0.8, (8, 2, ACTION_DIM)).astype(np.float32)
    sft.load_demonstrations({"obs": arrays, "actions": targets})
    before = {k: v.clone() for k, v in sft.get_weights()[0].items()}

    def demo_loss() -> float:  # on the demonstrations, Pi0's flow times and noise drawn alike each time
        with torch.no_grad(), torch.random.fork_rng():
            torch.manual_seed(0)
            return float(sft.policy.supervised_loss(sft.demonstrations["obs"], sft.demonstrations["actions"]))

    first = demo_loss()
    for _ in range(6):
        sft.sft_update(5)
    assert demo_loss() < 0.9 * first
    weights, version = sft.get_weights()
    assert version == 6
    moved = {k for k, v in weights.items() if v.is_floating_point() and not torch.equal(v, before[k])}
    assert moved and all(weights[k].dtype == torch.float32 for k in moved)
    assert any(v.dtype == torch.bfloat16 for v in weights.values())  # the frozen base, untouched

    rl = ActorWorker(policy=spec, algorithm=GroupConfig(name="grpo", group_size=2), channel=ListChannel(), seed=2,
                     group="actor", rank=0, world_size=1)
    rl.load_training_state(weights, None)
    for name, value in rl.get_weights()[0].items():
        assert torch.equal(value, weights[name]), name
    probe = make_obs(3, seed=9)
    torch.manual_seed(0)
    expected = sft.policy.act(probe, deterministic=True)
    torch.manual_seed(0)
    got = rl.policy.act(probe, deterministic=True)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
