"""The reasoning benches: engine tokens/s, async vs synchronous step time, accuracy curves under int8 rollout."""

import json

import pytest

from conftest import run_cli
from embodied_rl.bench.reasoning_bench import accuracy_curve, seconds_per_iteration

TINY = ["env.count=200", "env.heldout_count=20", "rl.prompts_per_iteration=2", "algorithm.group_size=2",
        "eval.num_problems=4", "rollout.max_new_tokens=3", "sft.batch_size=8"]


def test_generation_bench_measures_every_available_engine(tmp_path):
    result = run_cli("bench", "generation", "--model", "tiny", "--prompts", "8", "--new-tokens", "2", "--repeats",
                     "1", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["hf_fp32_tokens_per_s"] > 0 and report["hf_int8_tokens_per_s"] > 0
    assert report["ratio_int8_over_fp32"] == pytest.approx(
        report["hf_int8_tokens_per_s"] / report["hf_fp32_tokens_per_s"], rel=1e-2)


def test_the_step_time_and_the_curve_come_from_the_metrics_rows():
    rows = [{"train/iteration": 0, "eval/start/heldout_accuracy": 0.2},
            {"train/iteration": 1, "time/iteration_s": 9.0}, {"train/iteration": 2, "time/iteration_s": 2.0},
            {"train/iteration": 3, "time/iteration_s": 4.0, "eval/heldout_accuracy": 0.3}]
    assert seconds_per_iteration(rows, skip=1) == 3.0
    assert accuracy_curve(rows) == [[0, 0.2], [3, 0.3]]


@pytest.mark.slow
@pytest.mark.heavy  # left out of the default run (CI time): pytest -m heavy
def test_text_async_bench_runs_both_modes_from_one_start(tmp_path):
    result = run_cli("bench", "text-async", "--iterations", "3", "--sft-steps", "0", "--json", *TINY, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    sync, over = report["synchronous"], report["async"]
    assert sync["policy_staleness"] == 0 and over["policy_staleness"] == 1
    assert report["ratio_async_over_synchronous_step_time"] == pytest.approx(
        over["seconds_per_iteration"] / sync["seconds_per_iteration"], rel=1e-2)


def test_reasoning_benches_refuse_bad_counts_with_one_line(tmp_path):
    for args in (["text-async", "--iterations", "0"], ["generation", "--prompts", "0"],
                 ["text-tis", "--eval-every", "0"]):
        result = run_cli("bench", *args, cwd=tmp_path)
        assert result.returncode == 2 and "--" in result.stderr and "Traceback" not in result.stderr, result.stderr
