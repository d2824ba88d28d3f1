"""``embodied-rl train``: resolve the config, check the task starts, create the run directory, train."""

from __future__ import annotations

import json
import time
from pathlib import Path

from embodied_rl.commands.preflight import check_task_starts
from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.config.loader import to_yaml
from embodied_rl.utils.atomic import write_text_atomic
from embodied_rl.utils.checkpoint import load_checkpoint, list_checkpoints


def _resume_overrides(run_dir: Path, overrides: list[str]) -> tuple[str, list[str]]:
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        raise ConfigError(f"--resume: {run_dir} has no config.yaml; it is not a run directory")
    if not list_checkpoints(run_dir / "checkpoints"):
        raise ConfigError(f"--resume: {run_dir} has no checkpoint to resume from")
    return str(saved), overrides


def run_train(task: str | None, config_file: str | None, overrides: list[str], run_dir: str | None,
              resume: bool, ray_address: str | None) -> int:
    if ray_address:
        overrides = [*overrides, f"cluster.address={ray_address}"]
    if run_dir:
        overrides = [*overrides, f"run_dir={run_dir}"]
    if resume:
        if not run_dir:
            raise ConfigError("--resume needs --run-dir (the run to continue)")
        config_file, overrides = _resume_overrides(Path(run_dir), overrides)
    config = load_train_config(task, config_file, overrides)
    if config.task is None:
        raise ConfigError("no task given; pass --task NAME (see `embodied-rl tasks`)")
    directory = Path(config.run_dir or Path(config.runs_root) / f"{config.task}-{time.strftime('%Y%m%d-%H%M%S')}")
    if not resume and directory.exists() and any(directory.iterdir()):
        raise ConfigError(f"run_dir {directory} already exists and is not empty; pass --resume to continue it "
                          "or choose another directory")
    check_task_starts(config)

    from embodied_rl.runners.embodied import EmbodiedRunner

    checkpoint = load_checkpoint(directory) if resume else None
    config.run_dir = str(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not resume:
        write_text_atomic(directory / "config.yaml", to_yaml(config))
    print(f"run directory: {directory}", flush=True)
    runner = EmbodiedRunner(config, directory, checkpoint)
    final_eval = runner.run()
    summary = {"run_dir": str(directory), "env_steps": runner.env_steps, "iterations": runner.iteration,
               **final_eval}
    write_text_atomic(directory / "summary.json", json.dumps(summary, indent=2))
    print(json.dumps(summary), flush=True)
    return 0
