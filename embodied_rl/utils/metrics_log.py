"""Scalars to TensorBoard (``tensorboard/``) and to ``metrics.jsonl`` (one JSON object per logging step)."""

from __future__ import annotations

import json
from pathlib import Path

from embodied_rl.utils.atomic import write_text_atomic


def _env_steps(line: str) -> float:
    try:
        return float(json.loads(line).get("env_steps", 0))
    except ValueError:  # a line cut short by a crash
        return float("inf")


class MetricsLog:
    """``resumed_at``: the env steps of the checkpoint a resumed run starts from. What the interrupted run logged
    after it is dropped (those iterations run again): rows of ``metrics.jsonl`` past it are removed (atomically),
    and TensorBoard hides its events past it (``purge_step``)."""

    def __init__(self, run_dir: Path, resumed_at: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        path = Path(run_dir) / "metrics.jsonl"
        if resumed_at is not None and path.is_file():
            kept = [line for line in path.read_text().splitlines() if _env_steps(line) <= resumed_at]
            write_text_atomic(path, "".join(line + "\n" for line in kept))
        self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"),
                                    purge_step=None if resumed_at is None else resumed_at + 1)
        self.jsonl = open(path, "a", buffering=1)

    def log(self, scalars: dict, env_steps: int) -> None:
        clean = {k: float(v) for k, v in scalars.items() if v is not None}
        for key, value in clean.items():
            self.writer.add_scalar(key, value, env_steps)
        self.jsonl.write(json.dumps({"env_steps": env_steps, **clean}) + "\n")

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()
        self.jsonl.close()
