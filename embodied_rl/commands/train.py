"""``embodied-rl train``: resolve the config, check the task starts, create the run directory, train.

A staged recipe (``stages``) runs its stages one after another in ``<run_dir>/<i>-<name>/``, each a run directory
of its own, each starting from the previous stage's best checkpoint; ``--resume`` skips finished stages and
continues the first unfinished one from its latest checkpoint.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from embodied_rl.commands.preflight import check_task_starts
from embodied_rl.config import ConfigError, TrainConfig
from embodied_rl.config.loader import to_yaml
from embodied_rl.config.stages import load_stages
from embodied_rl.utils.atomic import write_text_atomic
from embodied_rl.utils.checkpoint import list_checkpoints, load_checkpoint

SUMMARY_FILE = "summary.json"


def _resume_config(run_dir: Path) -> str:
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        raise ConfigError(f"--resume: {run_dir} has no config.yaml; it is not a run directory")
    return str(saved)


def run_train(task: str | None, config_file: str | None, overrides: list[str], run_dir: str | None,
              resume: bool, ray_address: str | None) -> int:
    from embodied_rl.commands.train_reasoning import is_text_task, run_reasoning_train, saved_task

    if is_text_task(task or (saved_task(Path(run_dir)) if resume and run_dir else None)):
        if ray_address:
            overrides = [*overrides, f"cluster.address={ray_address}"]
        return run_reasoning_train(task, config_file, overrides, run_dir, resume)
    if ray_address:
        overrides = [*overrides, f"cluster.address={ray_address}"]
    if run_dir:
        overrides = [*overrides, f"run_dir={run_dir}"]
    if resume:
        if not run_dir:
            raise ConfigError("--resume needs --run-dir (the run to continue)")
        config_file = _resume_config(Path(run_dir))
    base, stages = load_stages(task, config_file, overrides)
    if base.task is None:
        raise ConfigError("no task given; pass --task NAME (see `embodied-rl tasks`)")
    directory = Path(base.run_dir or Path(base.runs_root) / f"{base.task}-{time.strftime('%Y%m%d-%H%M%S')}")
    if not resume and directory.exists() and any(directory.iterdir()):
        raise ConfigError(f"run_dir {directory} already exists and is not empty; pass --resume to continue it "
                          "or choose another directory")
    staged = len(stages) > 1 or stages[0].name != "train"
    if resume and not staged and not list_checkpoints(directory / "checkpoints"):
        raise ConfigError(f"--resume: {directory} has no checkpoint to resume from")
    check_task_starts(stages[0].config)
    directory.mkdir(parents=True, exist_ok=True)
    base.run_dir = str(directory)
    write_text_atomic(directory / "config.yaml", to_yaml(base))  # on --resume: with the overrides given now
    print(f"run directory: {directory}", flush=True)
    if not staged:
        summary = _run_one(stages[0].config, directory, resume)
    else:
        summary = _run_stages(stages, directory, resume)
    write_text_atomic(directory / SUMMARY_FILE, json.dumps(summary, indent=2))
    print(json.dumps(summary), flush=True)
    return 0


def _run_one(config: TrainConfig, directory: Path, resume: bool) -> dict:
    from embodied_rl.runners.embodied import EmbodiedRunner

    checkpoint = load_checkpoint(directory) if resume else None
    config.run_dir = str(directory)
    runner = EmbodiedRunner(config, directory, checkpoint)
    started = time.perf_counter()
    final_eval = runner.run()
    return {"run_dir": str(directory), "env_steps": runner.env_steps, "iterations": runner.iteration,
            "wall_s": round(time.perf_counter() - started, 1), "best_success_once": runner.best_success,
            **final_eval}


def _run_stages(stages: list, directory: Path, resume: bool) -> dict:
    from embodied_rl.runners.embodied import BEST_CHECKPOINT_DIR

    summaries, previous = {}, None
    for stage in stages:
        stage_dir = directory / stage.name
        done = stage_dir / SUMMARY_FILE
        if resume and done.is_file():
            summaries[stage.name] = json.loads(done.read_text())
            print(f"stage {stage.name}: finished earlier", flush=True)
        else:
            config = stage.config
            if config.init_from is None and previous is not None:
                best = list_checkpoints(previous / BEST_CHECKPOINT_DIR)
                config.init_from = str(best[-1] if best else previous)
            again = resume and bool(list_checkpoints(stage_dir / "checkpoints"))
            if not again:
                if stage_dir.exists():
                    import shutil

                    shutil.rmtree(stage_dir)  # an unfinished stage that never checkpointed starts over
                stage_dir.mkdir(parents=True)
                config.run_dir = str(stage_dir)
                write_text_atomic(stage_dir / "config.yaml", to_yaml(config))
            print(f"stage {stage.name}: {config.algorithm.name}"
                  f"{' from ' + config.init_from if config.init_from else ''}", flush=True)
            summaries[stage.name] = _run_one(config, stage_dir, again)
            write_text_atomic(done, json.dumps(summaries[stage.name], indent=2))
        previous = stage_dir
    return {"run_dir": str(directory), "stages": summaries}
