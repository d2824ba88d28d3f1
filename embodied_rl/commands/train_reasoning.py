"""``embodied-rl train --task math_arith`` (any text task): resolve the reasoning config, create the run directory,
train a causal LM (SFT, then the GRPO-family algorithm), write ``summary.json``."""

from __future__ import annotations

import json
import time
from pathlib import Path

from embodied_rl.config import ConfigError
from embodied_rl.config.reasoning import load_reasoning_config, reasoning_yaml
from embodied_rl.utils.atomic import write_text_atomic

SUMMARY_FILE = "summary.json"


def is_text_task(task: str | None) -> bool:
    import sim_envs
    from sim_envs.math.tasks import TEXT_SIMULATOR

    if not task or task not in sim_envs.list_tasks():
        return False
    return sim_envs.get_task(task).simulator == TEXT_SIMULATOR


def _check_task_starts(config) -> None:
    """Build the task's train and held-out sets in this process: a bad ``env.*`` option is one line, before
    anything is written."""
    import sim_envs

    try:
        for split in ("train", "heldout"):
            sim_envs.make(config.task, config.algorithm.group_size, split=split, group_size=config.algorithm.group_size,
                          **dict(config.env)).close()
    except (sim_envs.TaskConfigError, TypeError, ValueError) as error:
        raise ConfigError(f"task {config.task!r} with env options {dict(config.env)}: {error}") from None


def run_reasoning_train(task: str, config_file: str | None, overrides: list[str], run_dir: str | None,
                        resume: bool) -> int:
    from embodied_rl.runners.reasoning import ReasoningRunner

    if resume:
        raise ConfigError("--resume: reasoning runs cannot be resumed yet; start a new run (model.name=<run>/model "
                          "starts from a finished run's model)")
    config = load_reasoning_config(task, config_file, overrides)
    _check_task_starts(config)
    directory = Path(run_dir or config.run_dir or Path(config.runs_root) / f"{task}-{time.strftime('%Y%m%d-%H%M%S')}")
    if directory.exists() and any(directory.iterdir()):
        raise ConfigError(f"run_dir {directory} already exists and is not empty; choose another directory")
    directory.mkdir(parents=True, exist_ok=True)
    config.run_dir = str(directory)
    write_text_atomic(directory / "config.yaml", reasoning_yaml(config))
    print(f"run directory: {directory}", flush=True)
    started = time.perf_counter()
    runner = ReasoningRunner(config, directory)
    evaluations = runner.run()
    summary = {"run_dir": str(directory), "iterations": runner.iteration, "responses": runner.responses,
               "wall_s": round(time.perf_counter() - started, 1), **evaluations}
    write_text_atomic(directory / SUMMARY_FILE, json.dumps(summary, indent=2))
    print(json.dumps(summary), flush=True)
    return 0
