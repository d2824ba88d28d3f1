"""``embodied-rl report RUN_DIR...``: one self-contained HTML page comparing runs (``report.html``), its curves as
PNGs, its tables as ``report.json``, and with ``--screenshot`` the page as a headless Chromium draws it.

Runs whose configs differ only in the seed are seeds of one setting (``--group-by`` names the keys instead)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from embodied_rl.analysis.final_table import default_score_key, final_table
from embodied_rl.analysis.grouping import config_differences, group_runs
from embodied_rl.analysis.plots import plot_metric
from embodied_rl.analysis.report_page import render_page
from embodied_rl.analysis.runs import RETURN_KEY, SUCCESS_KEY, find_runs
from embodied_rl.config.errors import ConfigError
from embodied_rl.utils.atomic import write_bytes_atomic, write_text_atomic

PLOTS = ((SUCCESS_KEY, "env_steps"), (SUCCESS_KEY, "wall_s"), (RETURN_KEY, "env_steps"),
         ("train/success_once", "env_steps"), ("train/episode_return", "env_steps"),
         ("eval/heldout_accuracy", "env_steps"), ("eval/heldout_accuracy", "wall_s"))
"""(metric, x) drawn by default where some run logged the metric."""

REPORT_FILE = "report.html"


def _file_name(key: str, x: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", f"{key}_vs_{x}").strip("_") + ".png"


def build_report(paths: list[str], out_dir: Path, title: str | None = None, metrics: list[str] | None = None,
                 group_by: list[str] | None = None, video_mb: float = 20.0, score: str | None = None) -> dict:
    """Write the report of the runs under ``paths`` into ``out_dir``; returns what ``report.json`` holds."""
    if video_mb < 0:
        raise ConfigError(f"--video-mb={video_mb}: allowed: a number of megabytes >= 0")
    runs = find_runs(paths)
    settings = group_runs(runs, group_by)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = list(PLOTS) + [(key, x) for key in metrics or [] for x in ("env_steps", "wall_s")]
    figures = []
    for key, x in plots:
        png = plot_metric(settings, key, x, f"{key} vs {'env steps' if x == 'env_steps' else 'wall time'}")
        if png is not None:
            name = _file_name(key, x)
            write_bytes_atomic(out_dir / name, png)
            figures.append((name, png))
    score = score or default_score_key(runs)
    setting_rows, run_rows = final_table(settings, score)
    differences = config_differences(runs)
    videos = [(run.name, run.videos()[-1]) for run in runs if run.videos()]
    title = title or f"{len(runs)} run{'s' if len(runs) != 1 else ''} in {len(settings)} setting" \
                     f"{'s' if len(settings) != 1 else ''}"
    note = (f"Written {time.strftime('%Y-%m-%d %H:%M:%S')} by `embodied-rl report` from "
            + ", ".join(str(Path(p)) for p in paths) + ".")
    page = render_page(title, figures, setting_rows, run_rows, differences, [run.name for run in runs], videos,
                       out_dir, int(video_mb * 1e6), note, score)
    write_text_atomic(out_dir / REPORT_FILE, page)
    summary = {"title": title, "score": score, "settings": setting_rows, "runs": run_rows,
               "config_differences": {k: [str(v) for v in values] for k, values in differences.items()},
               "figures": [name for name, _ in figures], "videos": [str(path) for _, path in videos]}
    write_text_atomic(out_dir / "report.json", json.dumps(summary, indent=2) + "\n")
    return summary


def run_report(paths: list[str], out: str | None, title: str | None, metrics: list[str] | None,
               group_by: list[str] | None, video_mb: float, screenshot: bool, score: str | None = None) -> int:
    out_dir = Path(out) if out else Path("reports") / time.strftime("report-%Y%m%d-%H%M%S")
    summary = build_report(paths, out_dir, title, metrics, group_by, video_mb, score)
    for row in summary["settings"]:
        ci = row["success_ci"]
        success = "-" if row["success_iqm"] is None else \
            f"{row['success_iqm']:.3f} (95% CI {ci[0]:.3f}-{ci[1]:.3f})"
        print(f"{row['setting']}: {row['runs']} run(s), final {summary['score']} IQM {success}", flush=True)
    print(f"report: {out_dir / REPORT_FILE}", flush=True)
    if screenshot:
        from embodied_rl.analysis.screenshot import screenshot as take

        print(f"screenshot: {take(out_dir / REPORT_FILE, out_dir / 'report.png')}", flush=True)
    return 0
