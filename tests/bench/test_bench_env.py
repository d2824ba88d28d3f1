import json

import pytest

from conftest import run_cli


# Left out of the default run (CI time; pytest -m heavy runs it):
# a bench end to end.
@pytest.mark.heavy
@pytest.mark.slow
def test_bench_env_prints_one_json_object_with_both_loops_and_their_ratio(tmp_path):
    result = run_cli("bench", "env", "--task", "maniskill_pushcube", "--env-workers", "2", "--steps", "30",
                     "--repeats", "1", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert report["num_envs"] == 2 and report["steps_per_env"] == 30
    runtime, baseline = report["runtime_median"], report["baseline_median"]
    assert runtime > 0 and baseline > 0
    assert report["ratio_runtime_over_baseline"] == pytest.approx(runtime / baseline, rel=1e-2)


# Left out of the default run (CI time; pytest -m heavy runs it):
# a bench end to end
@pytest.mark.heavy
@pytest.mark.slow
def test_bench_env_on_metaworld_measures_gymnasiums_async_and_sync_vector_envs_in_the_same_run(tmp_path):
    result = run_cli("bench", "env", "--task", "metaworld_reach", "--env-workers", "1", "--envs-per-worker", "2",
                     "--steps", "30", "--repeats", "1", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    runtime = report["runtime_median"]
    for name in ("async_vector_env", "sync_vector_env"):
        assert len(report[f"baseline_{name}_steps_per_s"]) == 1
    assert report["ratio_runtime_over_baseline"] == pytest.approx(runtime / report["baseline_median"], rel=1e-2)
    assert report["ratio_runtime_over_sync_vector_env"] == pytest.approx(
        runtime / report["baseline_sync_vector_env_median"], rel=1e-2)


def test_bench_env_on_a_task_without_a_vector_env_baseline_is_one_line_and_exit_code_2(tmp_path):
    result = run_cli("bench", "env", "--task", "math_arith", "--steps", "5", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "math_arith" in lines[0], lines
