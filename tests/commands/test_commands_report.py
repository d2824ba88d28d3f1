"""``embodied-rl report``: the page, its tables against metrics.jsonl, its videos, bad input, and the page as a
headless Chromium draws it."""

import json

import numpy as np
import pytest

from embodied_rl.analysis.plots import COLOURS
from embodied_rl.analysis.screenshot import find_browser
from embodied_rl.commands.report import build_report
from tests_helpers import write_run

from conftest import run_cli


def _runs(root, seeds=2):
    """Two settings (grpo, ppo) x ``seeds`` seeds, each an SFT stage then an RL stage; grpo learns faster."""
    for algorithm, rate in (("grpo", 0.2), ("ppo", 0.1)):
        for seed in range(seeds):
            rl = [{"env_steps": 400 * (i + 1), "time/elapsed_s": 10.0 * (i + 1),
                   "eval/success_once": min(1.0, 0.2 + rate * i + 0.05 * seed), "eval/episode_return": 5.0 + i,
                   "eval/episodes": 16.0, "eval/state_seed": 10000000.0, "train/success_once": 0.1 * i}
                  for i in range(4)]
            sft = [{"env_steps": 0, "time/elapsed_s": 30.0, "train/sft_loss": 0.1, "eval/success_once": 0.2}]
            config = {"seed": seed, "task": "maniskill_pickcube",
                      "stages": [{"name": "sft"}, {"name": algorithm, "algorithm": {"name": algorithm}}]}
            write_run(root / f"{algorithm}-s{seed}", config, [("sft", sft, {"wall_s": 40.0}),
                                                             (algorithm, rl, {"wall_s": 45.0})])
    return sorted(root.iterdir())


def test_report_tables_equal_metrics_jsonl_and_videos_are_inline(tmp_path):
    import imageio.v2 as imageio

    paths = _runs(tmp_path / "runs")
    video = paths[0] / "1-grpo" / "videos" / "eval_iter_000004.mp4"
    video.parent.mkdir()
    imageio.mimwrite(video, [np.full((64, 64, 3), i * 20, np.uint8) for i in range(8)], fps=8)
    summary = build_report([str(p) for p in paths], tmp_path / "out")
    assert [s["setting"] for s in summary["settings"]] == ["name=grpo", "name=ppo"]
    for row in summary["runs"]:
        last = json.loads((tmp_path / "runs" / row["run"] / f"1-{row['run'].split('-')[0]}" / "metrics.jsonl")
                          .read_text().splitlines()[-1])
        assert row["success"] == last["eval/success_once"] and row["return"] == last["eval/episode_return"]
        assert row["env_steps"] == 1600 and row["wall_s"] == 85.0
    grpo = summary["settings"][0]
    assert grpo["success_iqm"] == pytest.approx((0.8 + 0.85) / 2)  # two seeds: the plain mean
    page = (tmp_path / "out" / "report.html").read_text()
    assert "0.825" in page and "data:video/mp4;base64," in page and page.count("data:image/png;base64,") >= 4
    assert "stages.1.algorithm.name" in page  # the config differences
    assert (tmp_path / "out" / "eval_success_once_vs_env_steps.png").stat().st_size > 10_000
    # over the video budget the video is linked, not embedded
    build_report([str(p) for p in paths], tmp_path / "linked", video_mb=0)
    assert "data:video/mp4" not in (tmp_path / "linked" / "report.html").read_text()


def test_bad_input_is_one_line(tmp_path):
    result = run_cli("report", str(tmp_path / "missing"), "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "no such directory" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(find_browser() is None, reason="no Chromium browser (scripts/install_system_deps.sh test "
                    "installs it)")
def test_the_page_in_a_headless_browser_shows_both_settings_curves(tmp_path):
    import imageio.v2 as imageio

    _runs(tmp_path / "runs", seeds=3)
    result = run_cli("report", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--screenshot", timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "name=grpo: 3 run(s), final eval/success_once IQM 0.850" in result.stdout
    image = imageio.imread(tmp_path / "out" / "report.png")[..., :3].astype(int)
    assert image.shape[1] == 1400 and image.std() > 10  # drawn, not blank
    for hex_colour in COLOURS[:2]:  # each setting's curves, drawn in its colour
        rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)])
        near = (np.abs(image - rgb).sum(axis=-1) < 40).sum()
        assert near > 1200, f"{hex_colour}: {near} pixels"  # the swatches of 4 table rows: 576
