"""Weights & Biases: one W&B run per run directory, its files in ``<run dir>/wandb/``.

Every row of ``metrics.jsonl`` is one W&B history row with the same keys and values (``env_steps`` among them),
and every metric is plotted against the run's step key (``define_metric``), so W&B's own row counter never merges
two rows that share a step (an SFT stage's rows, a text run's start and SFT evaluations). The resolved config is
the run's config and ``config.yaml`` one of its files; evaluation videos go in as ``eval/video`` with the row of
their evaluation; the summary lands in the run's summary. Offline (the default) nothing leaves the machine:
``wandb sync <run dir>/wandb/offline-run-*`` uploads it later. A resumed run continues the same W&B run id.
"""

from __future__ import annotations

import os
from pathlib import Path

from embodied_rl.utils.loggers.base import RunInfo, Tracker as BaseTracker, resumed_id, save_run_id

EXIT_CODES = {"finished": 0, "failed": 1, "killed": 130}


def _quiet_environment(offline: bool) -> dict:
    """Environment variables W&B reads (its service process too) for a quiet run; offline also: no network."""
    values = {"WANDB_SILENT": "true", "WANDB_CONSOLE": "off", "WANDB_DISABLE_CODE": "true"}
    if offline:
        values.update({"WANDB_MODE": "offline", "WANDB_DISABLE_GIT": "true"})
    return values


class Tracker(BaseTracker):
    name = "wandb"

    def __init__(self, run: RunInfo):
        import wandb

        self.wandb = wandb
        s = run.settings
        saved = {key: os.environ.get(key) for key in _quiet_environment(run.offline)}
        os.environ.update(_quiet_environment(run.offline))  # only while W&B starts its run
        try:
            previous = resumed_id(run, self.name)
            self.run = wandb.init(
                project=s.project, entity=s.entity, name=run.name, group=s.group, tags=list(s.tags) or None,
                dir=str(run.run_dir), mode="offline" if run.offline else "online", config=run.config,
                id=previous, resume="allow" if previous else None, reinit="create_new",
                settings=wandb.Settings(silent=True, console="off", x_disable_stats=True, save_code=False))
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        save_run_id(run.run_dir, self.name, {"id": self.run.id, "project": s.project, "dir": str(self.run.dir)})
        self.run.define_metric(run.step_key)
        self.run.define_metric("*", step_metric=run.step_key)
        if run.config_file is not None and Path(run.config_file).is_file():
            self.run.save(str(run.config_file), base_path=str(Path(run.config_file).parent), policy="now")

    def log(self, row: dict, step: int) -> None:
        self.run.log(dict(row))

    def log_video(self, path: Path, step: int) -> None:
        """Into the next history row (the row of the evaluation that filmed it), not a row of its own."""
        self.run.log({"eval/video": self.wandb.Video(str(path), format="mp4")}, commit=False)

    def close(self, summary: dict | None, status: str) -> None:
        if summary:
            self.run.summary.update({f"summary/{key}": value for key, value in summary.items()})
        self.run.finish(exit_code=EXIT_CODES.get(status, 1))
