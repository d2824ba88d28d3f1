"""What every tracker backend implements, and what it is told about the run it logs.

A backend receives each row of ``metrics.jsonl`` as written (``{"env_steps": ..., key: value, ...}``) with the step
of its x axis (``RunInfo.step_key``), evaluation videos as they are written, and at the end the run's summary and
how it ended. It keeps the id of its run in ``<run dir>/tracker_runs.json`` so a resumed run continues it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from embodied_rl.utils.atomic import write_text_atomic

RUN_IDS_FILE = "tracker_runs.json"
"""In the run directory: each backend's run id (and where its run lives), read back by a resumed run."""


@dataclass
class RunInfo:
    """A run as the trackers see it. ``settings``: its ``LoggingConfig``; ``config``: the resolved config as a
    mapping (W&B config, MLflow params); ``config_file``: its ``config.yaml`` (attached as a file); ``step_key``:
    the row key that is the x axis (``env_steps``; ``train/iteration`` for an SFT stage, whose env steps stay 0);
    ``resumed_at``: the step a resumed run continues from (None: a fresh run)."""
    run_dir: Path
    settings: object
    config: dict
    config_file: Path | None
    step_key: str = "env_steps"
    resumed_at: int | None = None

    @property
    def name(self) -> str:
        return self.settings.run_name or self.run_dir.name

    @property
    def offline(self) -> bool:
        return self.settings.mode == "offline"


def saved_run_ids(run_dir: Path) -> dict:
    """``tracker_runs.json`` of ``run_dir`` ({} when there is none or it is unreadable)."""
    try:
        return json.loads((Path(run_dir) / RUN_IDS_FILE).read_text())
    except (OSError, ValueError):
        return {}


def save_run_id(run_dir: Path, backend: str, entry: dict) -> None:
    """Record backend ``backend``'s run (``entry``: its id and where it lives) in ``tracker_runs.json``, atomically."""
    ids = saved_run_ids(run_dir)
    ids[backend] = entry
    write_text_atomic(Path(run_dir) / RUN_IDS_FILE, json.dumps(ids, indent=2) + "\n")


def resumed_id(run: RunInfo, backend: str, key: str = "id"):
    """The id of the run that ``run`` continues (a resumed run whose directory recorded one), else None."""
    if run.resumed_at is None:
        return None
    return saved_run_ids(run.run_dir).get(backend, {}).get(key)


class Tracker:
    """One backend's run. Subclasses open it in ``__init__`` and implement the four methods."""

    name = ""

    def log(self, row: dict, step: int) -> None:
        """One row of ``metrics.jsonl`` (its ``env_steps`` and float scalars) at ``step``."""
        raise NotImplementedError

    def log_video(self, path: Path, step: int) -> None:
        """An evaluation video just written to ``path``, filmed at ``step``."""
        raise NotImplementedError

    def close(self, summary: dict | None, status: str) -> None:
        """End the run: ``summary`` (``summary.json``'s fields; None when the run did not finish) and ``status``:
        finished, failed (an exception) or killed (an interrupt)."""
        raise NotImplementedError
