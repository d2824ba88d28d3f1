"""The report's final table against hand-computed values."""

import pytest

from embodied_rl.analysis.final_table import final_table
from embodied_rl.analysis.grouping import group_runs
from embodied_rl.analysis.runs import load_run
from tests_helpers import write_run


def _seed(tmp_path, seed, success, algorithm="grpo"):
    rows = [{"env_steps": 100, "time/elapsed_s": 5.0, "eval/success_once": 0.0},
            {"env_steps": 200, "time/elapsed_s": 10.0, "eval/success_once": success,
             "eval/episode_return": 10 * success,
             "eval/episodes": 64.0, "eval/state_seed": 10000000.0}]
    config = {"seed": seed, "algorithm": {"name": algorithm}, "eval": {"max_episode_steps": 50}}
    return load_run(write_run(tmp_path / f"{algorithm}-{seed}", config, [("train", rows, {"wall_s": 20.0})]))


def test_iqm_interval_and_per_run_rows(tmp_path):
    runs = [_seed(tmp_path, s, v) for s, v in enumerate([0.9, 0.1, 0.6, 0.5])] + [_seed(tmp_path, 0, 0.2, "ppo")]
    settings, rows = final_table(group_runs(runs))
    grpo, ppo = settings
    assert grpo["setting"] == "name=grpo" and grpo["runs"] == 4
    assert grpo["success_iqm"] == pytest.approx(0.55)  # the middle two of 0.1, 0.5, 0.6, 0.9
    assert grpo["success_mean"] == pytest.approx(0.525)
    assert grpo["success_std"] == pytest.approx(0.330403, abs=1e-6)  # sample std
    low, high = grpo["success_ci"]
    assert 0.1 <= low < 0.55 < high <= 0.9
    assert grpo["return_iqm"] == pytest.approx(5.5)
    assert grpo["env_steps_per_s"] == pytest.approx(10.0) and grpo["time_limit"] == 50
    assert grpo["eval_episodes"] == 64 and grpo["eval_state_seed"] == 10000000
    assert ppo["runs"] == 1 and ppo["success_ci"] == [0.2, 0.2]
    assert [row["success"] for row in rows] == [0.9, 0.1, 0.6, 0.5, 0.2]
    assert [row["best_success"] for row in rows] == [0.9, 0.1, 0.6, 0.5, 0.2]


def test_rows_carry_the_split_and_the_ood_splits_beside_it(tmp_path):
    from embodied_rl.analysis.report_page import _splits_cell

    rows = [{"env_steps": 200, "eval/success_once": 0.5, "eval/split": "vision", "eval_sampled/success_once": 0.4,
             "eval_execution/success_once": 0.25, "eval_semantic/success_once": 0.375}]
    run = load_run(write_run(tmp_path / "ood", {"seed": 0}, [("train", rows, {})]))
    (row,) = final_table(group_runs([run]))[1]
    assert row["split"] == "vision" and row["ood"] == {"execution": 0.25, "semantic": 0.375}
    assert _splits_cell(row) == "vision split; execution 0.250, semantic 0.375"
    assert _splits_cell({"split": None, "ood": {}}) == "in distribution"


def test_text_runs_are_scored_by_heldout_accuracy(tmp_path):
    from embodied_rl.analysis.final_table import default_score_key

    rows = [{"env_steps": 64, "eval/heldout_accuracy": 0.25}, {"env_steps": 128, "eval/heldout_accuracy": 0.5}]
    runs = [load_run(write_run(tmp_path / f"t{s}", {"seed": s}, [("train", rows, {})])) for s in range(2)]
    assert default_score_key(runs) == "eval/heldout_accuracy"
    settings, run_rows = final_table(group_runs(runs), "eval/heldout_accuracy")
    assert [row["success"] for row in run_rows] == [0.5, 0.5] and settings[0]["success_iqm"] == 0.5
    assert final_table(group_runs(runs))[1][0]["success"] is None  # no eval/success_once in these rows
