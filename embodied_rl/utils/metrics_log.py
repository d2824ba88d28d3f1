"""Scalars to ``metrics.jsonl`` (one JSON object per logging step) and to the run's trackers (``logging.backends``:
TensorBoard by default; W&B, SwanLab, MLflow on request, see ``utils/loggers/``).

Each row is written to ``metrics.jsonl`` first (line-buffered: a crash loses no finished row), then handed, as
written, to every tracker at the same step. A tracker that fails mid-run is dropped with one warning line; the run
and ``metrics.jsonl`` go on.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from embodied_rl.utils.atomic import write_text_atomic


def _step_of(line: str, step_key: str) -> float:
    try:
        return float(json.loads(line).get(step_key, 0))
    except ValueError:  # a line cut short by a crash
        return float("inf")


class MetricsLog:
    """``resumed_at``: the step (of ``step_key``) of the checkpoint a resumed run starts from. What the interrupted
    run logged after it is dropped (those iterations run again): rows of ``metrics.jsonl`` past it are removed
    (atomically), and TensorBoard hides its events past it (``purge_step``); W&B, SwanLab and MLflow continue their
    run (their own rows past it stay: they keep no way to remove them).

    ``settings``: the run's ``LoggingConfig`` (None: TensorBoard only); ``config_yaml``: the resolved config, given
    to the trackers (``config.yaml`` in the run directory is attached as a file); ``step_key``: the row key that is
    every tracker's step: ``env_steps``, or ``train/iteration`` where env steps do not advance (an SFT stage)."""

    def __init__(self, run_dir: Path, resumed_at: int | None = None, settings=None, config_yaml: str | None = None,
                 step_key: str = "env_steps"):
        from embodied_rl.config.logging_section import LoggingConfig
        from embodied_rl.utils.loggers import tracker_class
        from embodied_rl.utils.loggers.base import RunInfo

        run_dir = Path(run_dir)
        self.step_key = step_key
        path = run_dir / "metrics.jsonl"
        if resumed_at is not None and path.is_file():
            kept = [line for line in path.read_text().splitlines() if _step_of(line, step_key) <= resumed_at]
            write_text_atomic(path, "".join(line + "\n" for line in kept))
        settings = settings or LoggingConfig()
        config = _config_mapping(config_yaml)
        info = RunInfo(run_dir, settings, config, run_dir / "config.yaml", step_key, resumed_at)
        self.trackers = []
        try:
            for name in settings.backends:
                self.trackers.append(tracker_class(name)(info))
        except BaseException:
            self.close(None, "failed")
            raise
        self.jsonl = open(path, "a", buffering=1)

    def log(self, scalars: dict, env_steps: int) -> None:
        clean = {k: float(v) for k, v in scalars.items() if v is not None}
        row = {"env_steps": env_steps, **clean}
        self.jsonl.write(json.dumps(row) + "\n")
        step = int(row.get(self.step_key, env_steps))
        self._each("log", row, step)

    def log_video(self, path: Path, env_steps: int, step: int | None = None) -> None:
        """An evaluation video just written, for the trackers that attach files; ``step``: None -> ``env_steps``."""
        self._each("log_video", Path(path), env_steps if step is None else step)

    def close(self, summary: dict | None = None, status: str = "finished") -> None:
        """Flush and end every tracker's run (``summary``: the run's summary, None when it did not finish;
        ``status``: finished, failed or killed)."""
        for tracker in self.trackers:
            try:
                tracker.close(summary, status)
            except Exception as error:  # noqa: BLE001 - one tracker's failure must not hide the others
                _warn(tracker, "close", error)
        self.trackers = []
        if getattr(self, "jsonl", None) is not None:
            self.jsonl.close()

    def _each(self, method: str, *args) -> None:
        for tracker in list(self.trackers):
            try:
                getattr(tracker, method)(*args)
            except Exception as error:  # noqa: BLE001 - a tracker's failure never stops the training
                _warn(tracker, method, error)
                self.trackers.remove(tracker)


def _warn(tracker, method: str, error: Exception) -> None:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    print(f"warning: logging backend {tracker.name} failed in {method} ({type(error).__name__}: {first}); it logs "
          "nothing more in this run (metrics.jsonl is complete)", file=sys.stderr, flush=True)


def _config_mapping(config_yaml: str | None) -> dict:
    if not config_yaml:
        return {}
    import yaml

    loaded = yaml.safe_load(config_yaml)
    return loaded if isinstance(loaded, dict) else {}
