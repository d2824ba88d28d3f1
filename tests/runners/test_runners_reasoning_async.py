"""Reasoning runs with async rollout (the next batch generated beside the update), an int8 rollout copy with TIS,
and DAPO's resample-to-fill; and the synchronous loop's bookkeeping for comparison."""

import json

import pytest

SMALL = ["env.count=300", "env.heldout_count=20", "sft.steps=300", "sft.batch_size=32", "rl.iterations=4",
         "rl.prompts_per_iteration=4", "algorithm.group_size=4", "eval.every_iterations=0", "eval.num_problems=8",
         "rollout.max_new_tokens=4", "torch_threads=1"]


def _run(tmp_path, name, overrides):
    from embodied_rl.config.reasoning import load_reasoning_config
    from embodied_rl.runners.reasoning import ReasoningRunner

    config = load_reasoning_config("math_arith", None, [*SMALL, *overrides])
    runner = ReasoningRunner(config, tmp_path / name)
    runner.run()
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return runner, [r for r in rows if "time/iteration_s" in r]


@pytest.mark.slow
def test_async_int8_rollout_overlaps_generation_with_the_update_one_version_behind(tmp_path, cluster):
    runner, rows = _run(tmp_path, "async", ["rollout.max_staleness=1", "rollout.quantization=int8",
                                            "algorithm.tis_cap=2.0"])
    assert [r["train/iteration"] for r in rows] == [1, 2, 3, 4] and runner.responses == 4 * 4 * 4
    # the first batch was sampled by the weights the first update started from; every later one by the weights
    # one update older than the trainer's
    assert [r["train/policy_staleness"] for r in rows] == [0, 1, 1, 1]
    # the next batch was generated during the update (the worker-side spans overlap). On starved cores a tiny update
    # can end before the generation worker even picks up its call (seen once in a full-suite run), so one
    # overlapping iteration of three is required; a synchronous loop has none (the test below)
    assert any(r["time/overlap_s"] > 0 for r in rows[:-1])
    # an int8 sampler against the full-precision trainer: log-probs differ, the TIS weights stay near 1
    assert all(0.5 < r["train/tis_weight_mean"] <= 2.0 and r["train/rollout_trainer_logp_diff"] > 1e-4
               for r in rows)


@pytest.mark.slow
def test_the_synchronous_loop_never_overlaps_and_fills_dapo_batches_with_informative_groups(tmp_path, cluster):
    runner, rows = _run(tmp_path, "sync", ["algorithm.name=dapo", "algorithm.max_sampling_rounds=3"])
    assert [r["train/policy_staleness"] for r in rows] == [0, 0, 0, 0]
    assert all(r["time/overlap_s"] == 0 for r in rows[:-1])
    # same precision, same weights
    assert all(r["train/rollout_trainer_logp_diff"] < 1e-3 for r in rows if r["train/trained_responses"])
    # resample-to-fill: every round's responses are counted, only informative groups are trained on, and a batch
    # is short of prompts_per_iteration groups only when the rounds ran out
    assert runner.responses == sum(r["train/sampling_rounds"] for r in rows) * 4 * 4
    # every round reached the trainer through the channel (one generation worker: one part a round), none twice
    assert [r["channel/text_parts_received"] for r in rows] == [r["train/sampling_rounds"] for r in rows]
    assert all(r["channel/text_parts_dropped"] == 0 for r in rows)
    assert any(r["train/sampling_rounds"] > 1 for r in rows) and any(r["train/batch_groups"] > 0 for r in rows)
    for r in rows:
        assert r["train/trained_responses"] == r["train/batch_groups"] * 4
        assert r["train/batch_groups"] == 4 or r["train/sampling_rounds"] == 3
        if r["train/batch_groups"]:
            assert r["train/informative_fraction"] == 1.0


def test_resample_to_fill_needs_dynamic_sampling(tmp_path):
    from embodied_rl.config import ConfigError
    from embodied_rl.config.reasoning import load_reasoning_config

    with pytest.raises(ConfigError, match="algorithm.max_sampling_rounds=3"):
        load_reasoning_config("math_arith", None, ["algorithm.max_sampling_rounds=3", "algorithm.name=grpo"])
    with pytest.raises(ConfigError, match="rollout.quantization='int4'"):
        load_reasoning_config("math_arith", None, ["rollout.quantization=int4"])
