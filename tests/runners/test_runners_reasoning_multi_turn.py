"""`embodied-rl train --task math_tool` end to end: the multi-turn runner is chosen by the task's env, SFT trains on
demonstrations with the env's turns masked, GRPO trains on conversations whose env tokens are masked, every reward
component is logged, a checkpoint and a loadable model are written; the options it cannot run are one line."""

import json

import pytest

from conftest import run_cli

TINY = ["env.count=200", "env.heldout_count=20", "env.digits=1", "env.terms=3", "sft.steps=60", "sft.batch_size=16",
        "rl.iterations=2", "rl.prompts_per_iteration=4", "algorithm.group_size=4", "eval.every_iterations=1",
        "eval.num_problems=8", "rollout.max_new_tokens=20", "torch_threads=1"]
TRAIN_KEYS = ("train/reward", "reward/outcome", "reward/format", "reward/tool", "tool/calls", "tool/malformed",
              "tool/call_rate", "train/turns", "train/env_tokens", "train/model_tokens", "train/trained_tokens")


@pytest.mark.slow
def test_math_tool_trains_on_conversations_with_env_tokens_masked(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli("train", "--task", "math_tool", "--run-dir", str(run_dir), *TINY, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iterations"] == 2 and summary["responses"] == 2 * 4 * 4  # conversations
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    start, sft, rl = rows[0], rows[1], [r for r in rows if r.get("train/iteration", 0) >= 1]
    assert start["eval/start/problems"] == 8 and "eval/start/tool_call_rate" in start
    # SFT on demonstrations: the env's observation turns are not trained on
    assert sft["sft/loss"] < sft["sft/first_loss"] and 0 < sft["sft/trained_tokens"] < sft["sft/response_tokens"]
    assert sft["eval/sft/tool_call_rate"] > 0  # the warm start taught the model to call the calculator
    assert [r["train/iteration"] for r in rl] == [1, 2] and all("eval/heldout_accuracy" in r for r in rl)
    for r in rl:
        assert all(key in r for key in TRAIN_KEYS), sorted(r)
        assert r["train/reward"] == pytest.approx(r["reward/outcome"] + r["reward/tool"], abs=1e-6)  # format_weight 0
        assert 1 <= r["train/turns"] <= 3 and r["train/trained_responses"] == 16
        # the actor trained on the model's tokens only: every token the env inserted was masked out
        assert r["train/trained_tokens"] == r["train/model_tokens"] == r["train/response_tokens"] - r[
            "train/env_tokens"]
        # a conversation's first call is in its first turn, and answered (max_turns 3): env tokens iff calls
        assert (r["train/env_tokens"] > 0) == (r["tool/calls"] > 0)
        assert r["train/rollout_trainer_logp_diff"] < 1e-3  # the ids trained on are the ids sampled
    assert any(r["train/env_tokens"] > 0 for r in rl)  # tool calls happened, so masking was exercised
    assert (run_dir / "checkpoints" / "iter_000002" / "model.safetensors").is_file()
    from embodied_rl.models.causal_lm.loading import load_causal_lm

    model, tokenizer = load_causal_lm(run_dir / "model")
    assert tokenizer.decode(tokenizer("<calc>1+2</calc>")["input_ids"]) == "<calc>1+2</calc>"


@pytest.mark.parametrize("overrides, key", [(["rollout.max_staleness=1"], "rollout.max_staleness"),
                                            (["algorithm.max_sampling_rounds=2", "algorithm.name=dapo"],
                                             "algorithm.max_sampling_rounds")])
def test_options_the_multi_turn_runner_cannot_run_are_one_line_and_write_nothing(tmp_path, overrides, key):
    result = run_cli("train", "--task", "math_tool", "--run-dir", str(tmp_path / "run"), *overrides, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert key in line and "multi-turn" in line and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()
