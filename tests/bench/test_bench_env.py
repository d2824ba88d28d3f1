import json

import pytest

from conftest import run_cli


# Left out of the default run (CI time; pytest -m heavy runs it): a bench end to end.
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
