import json

import pytest

from conftest import run_cli


# Left out of the default run (CI time; pytest -m heavy runs it):
# a bench end to end; skipped renders: tests/sim_envs/test_sim_envs_render_skip.py
@pytest.mark.heavy
def test_bench_render_measures_both_variants_and_skipping_renders_is_faster(tmp_path):
    result = run_cli("bench", "render", "--task", "maniskill_pushcube", "--chunk", "4", "--image-size", "32",
                     "--decisions", "3", "--repeats", "1", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    every, chunked = report["render_every_step_median"], report["render_after_chunk_median"]
    assert report["steps_per_repeat"] == 12 and every > 0
    assert report["ratio_after_chunk_over_every_step"] == pytest.approx(chunked / every, rel=1e-2)
    assert chunked > every  # three of every four renders skipped: a render costs far more than a state step


def test_bench_render_refuses_a_zero_chunk_with_one_line():
    result = run_cli("bench", "render", "--chunk", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: --chunk=0 is out of range")
