"""TensorBoard: event files in ``<run dir>/tensorboard/``; a resumed run hides its events past the checkpoint
(``purge_step``), as ``metrics.jsonl`` drops its rows past it."""

from __future__ import annotations

from pathlib import Path

from embodied_rl.utils.loggers.base import RunInfo, Tracker as BaseTracker

TENSORBOARD_DIR = "tensorboard"


class Tracker(BaseTracker):
    name = "tensorboard"

    def __init__(self, run: RunInfo):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run.run_dir / TENSORBOARD_DIR),
                                    purge_step=None if run.resumed_at is None else run.resumed_at + 1)

    def log(self, row: dict, step: int) -> None:
        for key, value in row.items():
            if key != "env_steps":
                self.writer.add_scalar(key, value, step)
        self.writer.flush()  # what was logged survives a crash of the driver

    def log_video(self, path: Path, step: int) -> None:
        """Videos stay files in ``videos/`` (TensorBoard's own video needs moviepy and re-encodes every frame)."""

    def close(self, summary: dict | None, status: str) -> None:
        self.writer.flush()
        self.writer.close()
