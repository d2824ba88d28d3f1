"""Scalars to TensorBoard (``tensorboard/``) and to ``metrics.jsonl`` (one JSON object per logging step)."""

from __future__ import annotations

import json
from pathlib import Path


class MetricsLog:
    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"))
        self.jsonl = open(Path(run_dir) / "metrics.jsonl", "a", buffering=1)

    def log(self, scalars: dict, env_steps: int) -> None:
        clean = {k: float(v) for k, v in scalars.items() if v is not None}
        for key, value in clean.items():
            self.writer.add_scalar(key, value, env_steps)
        self.jsonl.write(json.dumps({"env_steps": env_steps, **clean}) + "\n")

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()
        self.jsonl.close()
