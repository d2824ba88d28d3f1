"""``embodied-rl train``: resolve the config, check the task starts, create the run directory, train.

A staged recipe (``stages``) runs its stages one after another in ``<run_dir>/<i>-<name>/``, each a run directory
of its own, each starting from the previous stage's best checkpoint; ``--resume`` skips finished stages and
continues the first unfinished one from its latest checkpoint.

``--retries N`` (job-level, like Ray Train's ``FailureConfig(max_failures)``): after a runtime failure (an
exception other than a bad config or an interrupt), the run is resumed from its newest checkpoint in the same
process, the same way ``--resume`` does, at most N times, with one line per retry; an attempt that never wrote a
checkpoint starts over.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

from embodied_rl.commands.preflight import check_task_starts
from embodied_rl.config import ConfigError, TrainConfig
from embodied_rl.config.loader import to_yaml
from embodied_rl.config.stages import load_stages
from embodied_rl.utils.atomic import write_text_atomic
from embodied_rl.utils.checkpoint import (checkpoint_iteration, has_checkpoint, is_stop_checkpoint, list_checkpoints,
                                         load_checkpoint, newest_first)

SUMMARY_FILE = "summary.json"
FAILURES_FILE = "failures.log"
"""In the run directory: the traceback of each failed attempt that ``--retries`` retried."""


def _resume_config(run_dir: Path) -> str:
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        raise ConfigError(f"--resume: {run_dir} has no config.yaml; it is not a run directory")
    return str(saved)


def run_train(task: str | None, config_file: str | None, overrides: list[str], run_dir: str | None,
              resume: bool, ray_address: str | None, retries: int = 0) -> int:
    from embodied_rl.commands.train_reasoning import is_text_task, run_reasoning_train, saved_task

    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(f"--retries={retries!r} is out of range; allowed: an integer >= 0")
    if is_text_task(task or (saved_task(Path(run_dir)) if resume and run_dir else None)):
        if ray_address:
            overrides = [*overrides, f"cluster.address={ray_address}"]
        return run_reasoning_train(task, config_file, overrides, run_dir, resume, retries)
    if ray_address:
        overrides = [*overrides, f"cluster.address={ray_address}"]
    if run_dir:
        overrides = [*overrides, f"run_dir={run_dir}"]
    if resume:
        if not run_dir:
            raise ConfigError("--resume needs --run-dir (the run to continue)")
        config_file = _resume_config(Path(run_dir))
    base, stages = load_stages(task, config_file, overrides, saved=resume)
    if base.task is None:
        raise ConfigError("no task given; pass --task NAME (see `embodied-rl tasks`)")
    directory = Path(base.run_dir or Path(base.runs_root) / f"{base.task}-{time.strftime('%Y%m%d-%H%M%S')}")
    if not resume and directory.exists() and any(directory.iterdir()):
        raise ConfigError(f"run_dir {directory} already exists and is not empty; pass --resume to continue it "
                          "or choose another directory")
    staged = len(stages) > 1 or stages[0].name != "train"
    if resume and not staged and not has_checkpoint(directory / "checkpoints"):
        raise ConfigError(f"--resume: {directory} has no checkpoint to resume from")
    check_task_starts(stages[0].config)
    directory.mkdir(parents=True, exist_ok=True)
    base.run_dir = str(directory)
    write_text_atomic(directory / "config.yaml", to_yaml(base))  # on --resume: with the overrides given now
    print(f"run directory: {directory}", flush=True)

    def attempt(number: int) -> dict:
        nonlocal stages, resume
        if number > 1:  # as `--resume` would: the run's own config.yaml (the overrides given and resizes since)
            stages, resume = load_stages(None, str(directory / "config.yaml"), [], saved=True)[1], True
        return _run_one(stages[0].config, directory, resume) if not staged else \
            _run_stages(stages, directory, resume)

    summary = with_retries(directory, retries, attempt)
    write_text_atomic(directory / SUMMARY_FILE, json.dumps(summary, indent=2))
    print(json.dumps(summary), flush=True)
    return 0


def with_retries(directory: Path, retries: int, attempt) -> dict:
    """``attempt(number)``'s summary, calling it again (number 2, 3, ...: it resumes the run) after a runtime failure
    (not a ``ConfigError``; an interrupt is no ``Exception``), at most ``retries`` times: one ``retry k/N`` line each
    and the traceback in the run's ``failures.log``; ``attempts`` in the summary when more than one ran."""
    number = 1
    while True:
        try:
            summary = attempt(number)
            break
        except ConfigError:
            raise
        except Exception as error:
            if number > retries:
                raise
            _record_failure(directory, number)
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            print(f"retry {number}/{retries}: attempt {number} failed ({type(error).__name__}: {first_line}); "
                  f"resuming {directory} from its newest checkpoint (traceback in {directory / FAILURES_FILE})",
                  file=sys.stderr, flush=True)
            number += 1
    if number > 1:
        summary["attempts"] = number
    return summary


def _record_failure(directory: Path, attempt: int) -> None:
    """Append the failed attempt's traceback to the run's ``failures.log``."""
    with open(directory / FAILURES_FILE, "a") as handle:
        handle.write(f"--- attempt {attempt} failed at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        traceback.print_exc(file=handle)


def _start_over(directory: Path) -> None:
    """A retried attempt that never wrote a checkpoint: clear what it logged (the run's ``config.yaml`` and
    ``failures.log`` stay), so the next attempt starts as the first did."""
    import shutil

    for entry in directory.iterdir():
        if entry.name in ("config.yaml", FAILURES_FILE):
            continue
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _resume_from(directory: Path):
    """The checkpoint ``--resume`` continues from (``load_checkpoint``'s rule: the newest, a clean one winning a
    tie with a stop one), with one note line saying which it is."""
    checkpoint = load_checkpoint(directory)
    counters, name = checkpoint.counters, checkpoint.path.name
    if is_stop_checkpoint(checkpoint.path):
        print(f"note: resuming from the stop checkpoint {name} ({counters.get('stop_reason', 'interrupted')}): "
              "it is of a later iteration than every clean checkpoint; it holds no env states and its weights may "
              "be one update past its counters, so this resume is not exact", file=sys.stderr, flush=True)
    else:
        skipped = [p.name for p in newest_first(directory / "checkpoints")
                   if is_stop_checkpoint(p) and checkpoint_iteration(p) == checkpoint_iteration(checkpoint.path)]
        also = f" (not the stop checkpoint {skipped[0]} of the same iteration: an exact resume needs the clean " \
               "one)" if skipped else ""
        print(f"note: resuming from {name} at iteration {counters.get('iteration', 0)}{also}", file=sys.stderr,
              flush=True)
    return checkpoint


def _run_one(config: TrainConfig, directory: Path, resume: bool) -> dict:
    from embodied_rl.runners.embodied import EmbodiedRunner

    if resume and not has_checkpoint(directory / "checkpoints"):
        _start_over(directory)  # only a retry gets here: `--resume` itself refuses a run without checkpoints
        resume = False
    checkpoint = _resume_from(directory) if resume else None
    config.run_dir = str(directory)
    runner = EmbodiedRunner(config, directory, checkpoint)
    runner.run()
    return dict(runner.summary)


def _group_stage(config: TrainConfig, directory: Path, stage: str) -> None:
    """A stage's trackers read as part of one experiment: its group (default: the staged run's directory name),
    its name ``<run>/<stage>``, and its MLflow store the staged run's own ``mlruns/`` (the group's parent run
    beside the stages' runs)."""
    from embodied_rl.utils.loggers.mlflow_tracker import MLRUNS_DIR

    section = config.logging
    section.group = section.group or directory.name
    section.run_name = f"{section.run_name or directory.name}/{stage}"
    if section.mlflow_tracking_uri is None:
        section.mlflow_tracking_uri = str(directory / MLRUNS_DIR)


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
            _group_stage(config, directory, stage.name)
            if config.init_from is None and previous is not None:
                best = list_checkpoints(previous / BEST_CHECKPOINT_DIR)
                config.init_from = str(best[-1] if best else previous)
            again = resume and has_checkpoint(stage_dir / "checkpoints")
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
