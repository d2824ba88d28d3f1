import json

import pytest

from conftest import run_cli


@pytest.mark.slow
@pytest.mark.heavy  # left out of the default run (CI time): pytest -m heavy
def test_bench_elastic_resizes_a_live_loop_and_accounts_for_every_transition(tmp_path):
    result = run_cli("bench", "elastic", "--steps", "10", "--rounds", "1", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["sizes"] == {"before": [1, 1], "added": [2, 2], "removed": [1, 1]}
    # 1 round of 1 worker x 4 envs x 10 steps, the added workers' first round (2 workers), 1 round at 2, 1 at 1
    assert report["transitions_simulated"] == 40 + 80 + 80 + 40
    assert report["transitions_trained"] == report["transitions_simulated"]  # the actor's count, the env workers'
    assert report["standby_workers"] == 1
    assert report["transitions_lost"] == 0 and report["transitions_duplicated"] == 0
    assert 0 < report["add"]["resize_s"] <= report["add"]["request_to_first_step_s"] < 5
    breakdown = report["add"]["first_step_breakdown_s"]
    assert list(breakdown) == ["process_start", "env_construction", "rest_of_resize", "first_step"]
    assert sum(breakdown.values()) == pytest.approx(report["add"]["request_to_first_step_s"], abs=1e-6)
    assert breakdown["process_start"] < 0.5  # the new env worker was built in a standby process
    for phase in ("before", "added", "removed"):
        assert report[f"{phase}_steps_per_s"] > 0
    assert report["added_vs_before"] == pytest.approx(report["added_steps_per_s"] / report["before_steps_per_s"])


def test_bench_elastic_rejects_a_bad_size_with_one_line(tmp_path):
    result = run_cli("bench", "elastic", "--rounds", "0", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0 and "--rounds" in result.stderr
