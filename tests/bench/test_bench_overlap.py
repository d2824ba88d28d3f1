import json

import pytest

from conftest import run_cli
from embodied_rl.bench.overlap_bench import time_breakdown, training_figures


def test_training_figures_take_the_evaluations_time_out(tmp_path):
    rows = [{"train/iteration": 1, "env_steps": 100, "time/elapsed_s": 10.0},
            {"train/iteration": 2, "env_steps": 200, "time/elapsed_s": 20.0, "eval/success_once": 0.5,
             "time/eval_s": 5.0},
            {"train/iteration": 3, "env_steps": 300, "time/elapsed_s": 35.0},  # 5 s of it was the evaluation
            {"train/iteration": 4, "env_steps": 400, "time/elapsed_s": 45.0, "eval/success_once": 0.9,
             "time/eval_s": 5.0}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    figures = training_figures(tmp_path, target=0.8)
    assert figures["training_s"] == 40.0 and figures["env_steps_per_s"] == 10.0
    assert figures["seconds_to_target"] == 40.0 and figures["env_steps_to_target"] == 400
    assert training_figures(tmp_path, target=0.95)["seconds_to_target"] is None


def test_time_breakdown_splits_each_iteration_into_sampling_update_sync_and_the_rest():
    first = {"time/iteration_s": 27.0, "time/sample_s": 9.0, "time/update_wall_s": 9.0}  # start-up: left out
    rows = [first] + [{"time/iteration_s": 1.8, "time/sample_s": 1.0, "time/update_wall_s": 0.5,
                       "time/sync_s": 0.1 * i, "time/env_waiting_share": 0.2 * i} for i in (1, 2)]
    assert time_breakdown(rows) == {"iteration_s": 1.8, "sample_s": 1.0, "update_s": 0.5, "weight_sync_s": 0.15,
                                    "other_s": 0.15, "env_waiting_share_of_sampling": 0.3}
    assert time_breakdown([{"time/iteration_s": 1.0}]) == {}  # rows without a sampling split (SFT)


@pytest.mark.slow
@pytest.mark.heavy  # left out of the default run (CI time): pytest -m heavy
def test_bench_overlap_trains_both_modes_and_reports_ratios(tmp_path):
    result = run_cli("bench", "overlap", "--max-env-steps", "80", "--eval-every", "2", "--eval-episodes", "2",
                     "--json", "env.num_workers=1", "env.envs_per_worker=2", "rollout.steps_per_iteration=10",
                     "algorithm.num_minibatches=2", "policy.hidden_sizes=[16]", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    sync, over = report["synchronous"], report["overlapped"]
    assert sync["env_steps"] == over["env_steps"] == 80 and sync["iterations"] == over["iterations"] == 4
    assert report["ratio_steps_per_s_overlapped_over_synchronous"] == pytest.approx(
        over["env_steps_per_s"] / sync["env_steps_per_s"], rel=1e-2)
    assert report["bare_loop_env_steps_per_s_on_core_0"] > 0
    assert report["synchronous_share_of_bare_loop"] == pytest.approx(
        sync["env_steps_per_s"] / report["bare_loop_env_steps_per_s_on_core_0"], rel=1e-2)


def test_bench_overlap_refuses_a_bad_target_with_one_line(tmp_path):
    result = run_cli("bench", "overlap", "--target", "1.5", cwd=tmp_path)
    assert result.returncode == 2 and "--target=1.5" in result.stderr and "Traceback" not in result.stderr
