"""A reasoning run whose trainer is 2 FSDP2 ranks over gloo trains as the single-process trainer does."""

import json

import pytest

# 20 SFT steps leave every answer wrong; DAPO's overlong shaping still scores responses apart by their length
SMALL = ["env.count=200", "env.heldout_count=20", "sft.steps=20", "sft.batch_size=16", "rl.iterations=2",
         "algorithm.overlong_max_len=4", "algorithm.overlong_cache=3", "rl.prompts_per_iteration=8", "algorithm.group_size=4", "eval.every_iterations=0", "eval.num_problems=8",
         "rollout.max_new_tokens=4", "torch_threads=1"]


def _rows(tmp_path, name, overrides):
    from embodied_rl.config.reasoning import load_reasoning_config
    from embodied_rl.runners.reasoning import ReasoningRunner

    ReasoningRunner(load_reasoning_config("math_arith", None, [*SMALL, *overrides]), tmp_path / name).run()
    return [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_two_rank_fsdp_trainer_matches_the_single_process_trainer(tmp_path, cluster):
    single = _rows(tmp_path, "single", [])
    sharded = _rows(tmp_path, "fsdp", ["actor.backend=fsdp", "actor.world_size=2"])
    assert len(single) == len(sharded) == 4  # start eval, SFT, 2 RL iterations
    for key in ("sft/first_loss", "sft/loss"):
        assert sharded[1][key] == pytest.approx(single[1][key], abs=1e-5)
    assert any(r.get("train/grad_norm", 0) > 0 for r in single[2:])  # an update that moved the weights
    for one, two in zip(single[2:], sharded[2:]):
        if "train/loss" in one:
            assert two["train/reward"] == one["train/reward"]  # same samples: the published weights agree
            assert two["train/loss"] == pytest.approx(one["train/loss"], abs=1e-5)
            assert two["train/grad_norm"] == pytest.approx(one["train/grad_norm"], rel=1e-4)
    from embodied_rl.models.causal_lm.loading import load_causal_lm

    a, _ = load_causal_lm(tmp_path / "single" / "model")
    b, _ = load_causal_lm(tmp_path / "fsdp" / "model")
    worst = max((x - y).abs().max().item() for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert worst < 1e-5
