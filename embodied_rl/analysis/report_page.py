"""The report as one self-contained HTML page: the curves (PNG data URIs), the final table per setting and per
run, the config differences, and the evaluation videos inline (mp4 data URIs up to a size budget, else links)."""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path

from embodied_rl.analysis.plots import colour

STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
.curves img { width: 600px; margin: 4px; border: 1px solid #eee; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 6px; vertical-align: middle; }
video { width: 320px; margin: 4px; } .note { color: #666; font-size: 12px; }
"""


def _number(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= 1000:
            return f"{int(value):,}"
        return f"{value:.{digits}f}"
    return html.escape(str(value))


def _table(headers: list[str], rows: list[list[str]], left: int = 1) -> str:
    head = "".join(f"<th class='l'>{h}</th>" if i < left else f"<th>{h}</th>" for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td class='l'>{c}</td>" if i < left else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _setting_cell(label: str, index: int) -> str:
    return f"<span class='swatch' style='background:{colour(index)}'></span>{html.escape(label)}"


def _settings_table(setting_rows: list[dict]) -> str:
    rows = []
    for index, row in enumerate(setting_rows):
        ci = row["success_ci"]
        rows.append([_setting_cell(row["setting"], index), str(row["runs"]), _number(row["success_iqm"]),
                     "-" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]",
                     "-" if row["success_mean"] is None else f"{row['success_mean']:.3f} ± {row['success_std']:.3f}",
                     _number(row["return_iqm"], 2), _number(row["eval_episodes"], 0),
                     _number(row["eval_state_seed"], 0), _number(row["time_limit"]), _number(row["env_steps"], 0),
                     _number(row["wall_s"], 0), _number(row["env_steps_per_s"], 1)])
    return _table(["setting", "seeds", "success IQM", "95% CI (bootstrap)", "success mean ± std", "return IQM",
                   "eval episodes", "eval state seed", "time limit", "env steps", "wall time (s)", "env steps/s"],
                  rows)


def _runs_table(run_rows: list[dict], labels: list[str]) -> str:
    rows = [[_setting_cell(row["setting"], labels.index(row["setting"])), html.escape(row["run"]),
             _number(row["seed"]), _number(row["success"]), _number(row["success_at_end"]), _number(row["return"], 2),
             _number(row["best_success"]), _number(row["env_steps"], 0), _number(row["wall_s"], 0),
             _number(row["env_steps_per_s"], 1), _splits_cell(row)] for row in run_rows]
    return _table(["setting", "run", "seed", "success", "success at end", "return", "best success", "env steps",
                   "wall time (s)", "env steps/s", "evaluated on / out of distribution"], rows, left=2)


def _splits_cell(row: dict) -> str:
    """Where the success was measured (a split, or in distribution) and each OOD split's success beside it."""
    where = f"{row.get('split')} split" if row.get("split") else "in distribution"
    ood = ", ".join(f"{split} {_number(value)}" for split, value in (row.get("ood") or {}).items())
    return html.escape(f"{where}; {ood}" if ood else where)


def _differences_table(differences: dict[str, list], run_names: list[str]) -> str:
    if not differences:
        return "<p>The runs' configs are the same (but for seeds and paths).</p>"
    rows = [[html.escape(key)] + [html.escape(str(value)) for value in values] for key, values in differences.items()]
    return _table(["key"] + [html.escape(name) for name in run_names], rows, left=len(run_names) + 1)


def _videos(videos: list[tuple[str, Path]], out_dir: Path, budget_bytes: int) -> str:
    if not videos:
        return "<p>No evaluation video in these runs (eval.video_episodes > 0 records one).</p>"
    parts, used = [], 0
    for run_name, path in videos:
        size = path.stat().st_size
        if used + size <= budget_bytes:
            used += size
            source = "data:video/mp4;base64," + base64.b64encode(path.read_bytes()).decode()
        else:
            source = html.escape(os.path.relpath(path, out_dir))
        parts.append(f"<figure style='display:inline-block'><video controls muted loop src='{source}'></video>"
                     f"<figcaption class='note'>{html.escape(run_name)}: {html.escape(path.name)}</figcaption>"
                     "</figure>")
    return "".join(parts)


def render_page(title: str, figures: list[tuple[str, bytes]], setting_rows: list[dict], run_rows: list[dict],
                differences: dict[str, list], run_names: list[str], videos: list[tuple[str, Path]],
                out_dir: Path, video_budget_bytes: int, note: str, score_key: str = "eval/success_once") -> str:
    """The page's HTML. ``figures``: ``(caption, png bytes)``; ``videos``: ``(run name, mp4 path)``."""
    images = "".join(f"<img alt='{html.escape(caption)}' title='{html.escape(caption)}' "
                     f"src='data:image/png;base64,{base64.b64encode(png).decode()}'>" for caption, png in figures)
    labels = [row["setting"] for row in setting_rows]
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{STYLE}</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="note">{html.escape(note)}</p>
<h2>Final evaluation on the fixed state set</h2>
{_settings_table(setting_rows)}
<p class="note">Success: {html.escape(score_key)} of each run's last evaluation (metrics.jsonl). IQM: interquartile mean
over seeds (the plain mean below 4 seeds); CI: 95% percentile bootstrap over seeds (2,000 resamples, seed 0).
Env steps/s: env steps over the wall time of the stages that stepped envs.</p>
<h2>Curves</h2>
<div class="curves">{images or "<p>No run logged a plotted metric.</p>"}</div>
<h2>Runs</h2>
{_runs_table(run_rows, labels)}
<h2>Config differences</h2>
{_differences_table(differences, run_names)}
<h2>Evaluation videos</h2>
{_videos(videos, out_dir, video_budget_bytes)}
</body></html>
"""
