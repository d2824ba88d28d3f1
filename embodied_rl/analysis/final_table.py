"""The final table of a report: each run's last evaluation on the fixed state set, and each setting's
interquartile mean over its seeds with a 95% percentile-bootstrap interval (``statistics.py``).

Every number of a run's row is read from its ``metrics.jsonl`` (the last row holding ``eval/success_once``), its
stages' summaries (wall time) or its config; nothing is recomputed from videos or TensorBoard."""

from __future__ import annotations

import numpy as np

from embodied_rl.analysis.grouping import Setting
from embodied_rl.analysis.runs import RETURN_KEY, SUCCESS_KEY, Run

HELDOUT_KEY = "eval/heldout_accuracy"
from embodied_rl.analysis.statistics import bootstrap_interval, interquartile_mean


def default_score_key(runs: list[Run]) -> str:
    """``eval/success_once`` where some run logged it, else a text task's ``eval/heldout_accuracy`` if some did."""
    for key in (SUCCESS_KEY, HELDOUT_KEY):
        if any(run.final(key) is not None for run in runs):
            return key
    return SUCCESS_KEY


def run_row(run: Run, score_key: str = SUCCESS_KEY) -> dict:
    """One run's final figures (None where it logged none); ``success`` is the last ``score_key``."""
    final = run.final_evaluation(score_key)
    steps_per_s = run.env_steps_per_s()
    return {
        "run": run.name, "path": str(run.path), "seed": run.seed,
        "success": final.get(score_key), "return": final.get(RETURN_KEY),
        "success_at_end": final.get("eval/success_at_end"),
        "eval_episodes": final.get("eval/episodes"), "eval_state_seed": final.get("eval/state_seed"),
        "best_success": max(run.curve(score_key)[1], default=None),
        "env_steps": run.env_steps, "wall_s": run.wall_s, "env_steps_per_s": steps_per_s,
        "time_limit": _time_limit(run), "split": final.get("eval/split"), "ood": ood_success(final),
    }


def ood_success(evaluation: dict) -> dict:
    """``{split: success_once}`` of the out-of-distribution splits an evaluation row ran beside its own
    (``eval.ood_splits``: keys ``eval_<split>/success_once``), in the row's order."""
    return {key[len("eval_"):-len("/success_once")]: value for key, value in evaluation.items()
            if key.startswith("eval_") and key.endswith("/success_once") and not key.startswith("eval_sampled/")}


def _time_limit(run: Run):
    """The evaluation's episode step limit the last stage ran under (None: the task's own)."""
    last = len(run.stages) - 1
    for key in (f"stages.{last}.eval.max_episode_steps", f"stages.{last}.env.max_episode_steps",
                "eval.max_episode_steps", "env.max_episode_steps"):
        if run.config.get(key) is not None:
            return run.config[key]
    return None


def setting_row(setting: Setting, rows: list[dict], seed: int = 0) -> dict:
    """A setting's seeds summarised: the IQM, its bootstrap interval, mean and std of final success and return;
    the mean env steps, wall time and env steps/s."""
    row: dict = {"setting": setting.label, "runs": len(rows)}
    for key in ("success", "return"):
        values = np.array([r[key] for r in rows if r[key] is not None], dtype=np.float64)
        if values.size:
            row[f"{key}_iqm"] = interquartile_mean(values)
            row[f"{key}_ci"] = list(bootstrap_interval(values, seed=seed))
            row[f"{key}_mean"] = float(values.mean())
            row[f"{key}_std"] = float(values.std(ddof=1)) if values.size > 1 else 0.0
        else:
            row[f"{key}_iqm"] = row[f"{key}_ci"] = row[f"{key}_mean"] = row[f"{key}_std"] = None
    for key in ("env_steps", "wall_s", "env_steps_per_s"):
        values = [r[key] for r in rows if r[key] is not None]
        row[key] = float(np.mean(values)) if values else None
    episodes = {r["eval_episodes"] for r in rows}
    states = {r["eval_state_seed"] for r in rows}
    limits = {r["time_limit"] for r in rows}
    row["eval_episodes"] = episodes.pop() if len(episodes) == 1 else None
    row["eval_state_seed"] = states.pop() if len(states) == 1 else None
    row["time_limit"] = limits.pop() if len(limits) == 1 else None
    return row


def final_table(settings: list[Setting], score_key: str = SUCCESS_KEY) -> tuple[list[dict], list[dict]]:
    """``(setting rows, run rows)``; run rows carry their setting's label."""
    setting_rows, run_rows = [], []
    for setting in settings:
        rows = [{"setting": setting.label, **run_row(run, score_key)} for run in setting.runs]
        run_rows.extend(rows)
        setting_rows.append(setting_row(setting, rows))
    return setting_rows, run_rows
