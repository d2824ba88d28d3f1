"""Requests to resize a live run's env and rollout worker groups: a file in the run directory, written atomically
(``request_scale``, ``embodied-rl scale``), which the run takes between iterations (``take_scale_request``)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from embodied_rl.config import ConfigError
from embodied_rl.utils.atomic import write_text_atomic

SCALE_REQUEST_FILE = "scale_request.json"
GROUPS = ("env", "rollout")
MAX_WORKERS = 256
_STAGE_DIR = re.compile(r"^(\d+)-")


def target_run_dir(run_dir: Path) -> Path:
    """The run directory a request goes to: ``run_dir`` itself, or for a staged recipe its newest stage's."""
    run_dir = Path(run_dir)
    if not any((run_dir / name).is_file() for name in ("config.yaml", "metrics.jsonl")):
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml or metrics.jsonl)")
    stages = sorted((int(m.group(1)), p) for p in run_dir.iterdir()
                    if p.is_dir() and (m := _STAGE_DIR.match(p.name)) and (p / "config.yaml").is_file())
    return stages[-1][1] if stages else run_dir


def parse_sizes(assignments: list[str]) -> dict[str, int]:
    """``["env=6", "rollout=2"]`` -> ``{"env": 6, "rollout": 2}``; one ``ConfigError`` line for anything else."""
    sizes: dict[str, int] = {}
    for assignment in assignments:
        name, sep, value = assignment.partition("=")
        if not sep or name not in GROUPS:
            raise ConfigError(f"{assignment!r} is not a size; allowed: env=N and rollout=N")
        try:
            size = int(value)
        except ValueError:
            size = 0
        if not 1 <= size <= MAX_WORKERS or str(size) != value.strip():
            raise ConfigError(f"{name}={value!r} is out of range; allowed: an integer from 1 to {MAX_WORKERS}")
        sizes[name] = size
    if not sizes:
        raise ConfigError("nothing to scale; give env=N and/or rollout=N")
    return sizes


def request_scale(run_dir: str | Path, env: int | None = None, rollout: int | None = None) -> Path:
    """Ask the run in ``run_dir`` to resize its groups after its current iteration; returns the request's path.
    A newer request replaces one not yet applied."""
    sizes = parse_sizes([f"{k}={v}" for k, v in (("env", env), ("rollout", rollout)) if v is not None])
    path = target_run_dir(Path(run_dir)) / SCALE_REQUEST_FILE
    write_text_atomic(path, json.dumps({**sizes, "requested_at": time.time()}))
    return path


def take_scale_request(run_dir: Path) -> dict | None:
    """The pending request of the run in ``run_dir`` (removed), or None; a malformed one is dropped with a
    warning by the caller (``ConfigError``)."""
    path = Path(run_dir) / SCALE_REQUEST_FILE
    if not path.is_file():
        return None
    try:
        text = path.read_text()
    finally:
        path.unlink(missing_ok=True)
    try:
        request = json.loads(text)
        sizes = parse_sizes([f"{k}={request[k]}" for k in GROUPS if k in request])
    except (ValueError, TypeError, AttributeError) as error:
        raise ConfigError(f"{path}: not a scale request ({error})") from None
    return {**sizes, "requested_at": float(request.get("requested_at", time.time()))}
