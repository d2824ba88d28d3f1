"""A reasoning run resumed from a checkpoint goes on bit for bit as if it had never stopped: the same metrics rows
and the same final weights as the uninterrupted run (weights, AdamW moments, the KL reference, the RNGs and the
env's prompt sampler all come back). Also for a Qwen2 published in bf16 (float32 master weights in the checkpoint,
the saved model in bf16), a Llama-3-style model without a pad token, and LoRA adapters on the bf16 Qwen2."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from conftest import run_cli

SMALL = ["env.count=60", "env.heldout_count=4", "sft.steps=3", "sft.batch_size=4", "rl.iterations=4",
         "rl.prompts_per_iteration=2", "algorithm.group_size=4", "algorithm.kl_coef=0.1", "rl.lr=1e-3",
         "eval.every_iterations=0", "eval.num_problems=2", "rollout.max_new_tokens=3",
         "checkpoint.every_iterations=2", "torch_threads=1"]


def _rows(run_dir) -> list[dict]:
    """Metrics rows without the timings (the only thing a resumed run may change)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


MULTI_TURN = ["env.count=60", "env.heldout_count=4", "sft.steps=3", "sft.batch_size=4", "rl.iterations=4",
              "rl.prompts_per_iteration=2", "algorithm.group_size=4", "rl.lr=1e-3", "eval.every_iterations=0",
              "eval.num_problems=2", "rollout.max_new_tokens=6", "checkpoint.every_iterations=2",
              "torch_threads=1"]


# The plain bf16 Qwen2 and the Llama-3 runs only with -m heavy (CI time): the LoRA run resumes a bf16 Qwen2 too, and
# loading both as published and saving float32 masters as bf16 have their own tests (models/causal_lm).
@pytest.mark.parametrize("task, overrides", [("math_arith", SMALL),
                                             pytest.param("math_tool", MULTI_TURN, marks=pytest.mark.slow),
                                             pytest.param("math_arith", SMALL + ["model.name=qwen2"],
                                                          marks=[pytest.mark.slow, pytest.mark.heavy]),
                                             pytest.param("math_arith", SMALL + ["model.name=llama3"],
                                                          marks=[pytest.mark.slow, pytest.mark.heavy]),
                                             pytest.param("math_arith", SMALL + ["model.name=qwen2",
                                                                                 "actor.lora_rank=4"],
                                                          marks=pytest.mark.slow)])
def test_a_resumed_reasoning_run_continues_bit_for_bit(tmp_path, cluster, task, overrides):
    from embodied_rl.config.reasoning import load_reasoning_config
    from embodied_rl.runners.reasoning import ReasoningRunner
    from embodied_rl.runners.reasoning_multi_turn import MultiTurnReasoningRunner
    from embodied_rl.utils.checkpoint import load_checkpoint

    from embodied_rl.models.causal_lm.tiny_checkpoints import ARCHITECTURES, write_tiny_checkpoint

    Runner = MultiTurnReasoningRunner if task == "math_tool" else ReasoningRunner
    published = [o.split("=")[1] for o in overrides if o.split("=")[-1] in ARCHITECTURES]
    if published:  # a bf16 checkpoint in a published layout, made here
        directory = write_tiny_checkpoint(tmp_path / published[0], published[0])
        overrides = [o for o in overrides if not o.startswith("model.name=")] + [f"model.name={directory}"]
    config = load_reasoning_config(task, None, overrides)
    whole = tmp_path / "whole"
    Runner(config, whole).run()
    assert sorted(p.name for p in (whole / "checkpoints").glob("iter_*")) == ["iter_000002", "iter_000004"]

    # a crash after iteration 3: its rows were logged, its checkpoint (iteration 4) and model never written
    crashed = tmp_path / "crashed"
    shutil.copytree(whole, crashed)
    shutil.rmtree(crashed / "checkpoints" / "iter_000004")
    shutil.rmtree(crashed / "model")
    rows = (crashed / "metrics.jsonl").read_text().splitlines()
    (crashed / "metrics.jsonl").write_text("\n".join(rows[:-1]) + "\n")
    checkpoint = load_checkpoint(crashed)
    assert checkpoint.counters["iteration"] == 2 and checkpoint.env_state

    runner = Runner(load_reasoning_config(task, None, overrides), crashed, checkpoint)
    runner.run()
    assert runner.iteration == 4
    assert _rows(crashed) == _rows(whole)  # start eval, SFT, 4 iterations: 3 and 4 run again, logged once
    expected, got = load_file(str(whole / "model" / "model.safetensors")), load_file(
        str(crashed / "model" / "model.safetensors"))
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(got[name], expected[name]), name
    if published:  # saved as published (bf16); the checkpoint holds the float32 master weights
        assert {v.dtype for v in got.values()} == {torch.bfloat16}
        masters = load_file(str(whole / "checkpoints" / "iter_000004" / "model.safetensors"))
        if "actor.lora_rank=4" in overrides:  # the frozen base in bf16, the adapters in float32; saved merged
            assert {v.dtype for k, v in masters.items() if "lora_" in k} == {torch.float32}
            assert {v.dtype for k, v in masters.items() if "lora_" not in k} == {torch.bfloat16}
            assert not any("lora_" in k for k in got) and got.keys() == load_file(
                str(directory / "model.safetensors")).keys()
            base = load_file(str(directory / "model.safetensors"))
            assert any(not torch.equal(got[k], base[k]) for k in got)  # the merged adapters moved the weights
        else:
            assert {v.dtype for v in masters.values()} == {torch.float32}
        rows = [r for r in _rows(whole) if "train/rollout_trainer_logp_diff" in r]
        assert rows and max(r["train/rollout_trainer_logp_diff"] for r in rows) < 5e-3  # bf16 sampler, fp32 masters


@pytest.mark.parametrize("make, fragment", [
    (lambda d: None, "has no checkpoint to resume from"),
    (lambda d: (d / "config.yaml").write_text("task: math_tool\n"), "has no checkpoint to resume from"),
])
def test_resume_refusals_are_one_line(tmp_path, make, fragment):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("task: math_arith\n")
    make(run_dir)
    result = run_cli("train", "--run-dir", str(run_dir), "--resume", cwd=tmp_path)
    assert result.returncode == 2 and fragment in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml"]
