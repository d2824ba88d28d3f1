"""``embodied-rl train --task math_arith`` (any text task): resolve the reasoning config, create the run directory,
train a causal LM (SFT, then the GRPO-family algorithm), write ``summary.json``. A task whose env is multi-turn
(``math_tool``) runs ``MultiTurnReasoningRunner``, single-turn ones ``ReasoningRunner``.

``--retries N``, as for embodied runs (``commands/train.py``): after a runtime failure the run resumes from its
newest checkpoint (a stop checkpoint the failure left included: the runner writes one at an iteration's boundary
while the trainer lives), at most N times, one line per retry, the traceback in ``failures.log``; an attempt
that never wrote a checkpoint starts over. A dead trainer rank, generation worker or env worker is replaced this
way: every worker is made anew from the checkpoint."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import yaml

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


def _check_task_starts(config) -> bool:
    """Build the task's train and held-out sets in this process: a bad ``env.*`` option is one line, before
    anything is written. Whether the task's env is multi-turn (its ``multi_turn`` flag, ``TextTaskEnv``'s)."""
    import sim_envs

    multi_turn = []
    try:
        for split in ("train", "heldout"):
            env = sim_envs.make(config.task, config.algorithm.group_size, split=split,
                                group_size=config.algorithm.group_size, **dict(config.env))
            multi_turn.append(bool(getattr(env, "multi_turn", False)))
            env.close()
    except (sim_envs.TaskConfigError, TypeError, ValueError) as error:
        raise ConfigError(f"task {config.task!r} with env options {dict(config.env)}: {error}") from None
    return any(multi_turn)


def saved_task(run_dir: Path) -> str | None:
    """The task named in a run directory's ``config.yaml`` (None where there is none to read)."""
    try:
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return saved.get("task") if isinstance(saved, dict) else None


def _resume_checkpoint(directory: Path, config):
    """The newest readable checkpoint of ``directory`` for ``--resume``, or one line saying why there is none."""
    from embodied_rl.utils.checkpoint import has_checkpoint, is_stop_checkpoint, load_checkpoint

    if not has_checkpoint(directory / "checkpoints"):
        raise ConfigError(f"--resume: {directory} has no checkpoint to resume from")
    checkpoint = load_checkpoint(directory)
    if is_stop_checkpoint(checkpoint.path):
        print(f"note: resuming from the stop checkpoint {checkpoint.path.name} "
              f"({checkpoint.counters.get('stop_reason', 'interrupted')}), written at an iteration's boundary",
              file=sys.stderr, flush=True)
    if checkpoint.counters.get("task") != config.task:
        raise ConfigError(f"--resume: the checkpoint {checkpoint.path} is of task "
                          f"{checkpoint.counters.get('task')!r}, not {config.task!r}")
    return checkpoint


def run_reasoning_train(task: str, config_file: str | None, overrides: list[str], run_dir: str | None,
                        resume: bool, retries: int = 0) -> int:
    from embodied_rl.commands.train import _start_over, with_retries
    from embodied_rl.utils.checkpoint import has_checkpoint

    if resume:
        if not run_dir:
            raise ConfigError("--resume needs --run-dir (the run to continue)")
        config_file = str(Path(run_dir) / "config.yaml")  # the run's own config, with the overrides given now
    config = load_reasoning_config(task, config_file, overrides, saved=resume)
    multi_turn = _check_task_starts(config)
    if multi_turn:  # a conversation env: the multi-turn rollout (refusing what it cannot do)
        from embodied_rl.runners.reasoning_multi_turn import MultiTurnReasoningRunner as Runner, check_multi_turn

        check_multi_turn(config)
    else:
        from embodied_rl.runners.reasoning import ReasoningRunner as Runner
    if resume:
        directory = Path(run_dir)
        checkpoint = _resume_checkpoint(directory, config)
    else:
        directory = Path(run_dir or config.run_dir or
                         Path(config.runs_root) / f"{config.task}-{time.strftime('%Y%m%d-%H%M%S')}")
        if directory.exists() and any(directory.iterdir()):
            raise ConfigError(f"run_dir {directory} already exists and is not empty; pass --resume to continue it "
                              "or choose another directory")
        checkpoint = None
    directory.mkdir(parents=True, exist_ok=True)
    config.run_dir = str(directory)
    write_text_atomic(directory / "config.yaml", reasoning_yaml(config))
    print(f"run directory: {directory}", flush=True)

    def attempt(number: int) -> dict:
        nonlocal config, checkpoint
        if number > 1:  # as `--resume` would: the run's own config.yaml; no checkpoint yet: start over
            config = load_reasoning_config(None, str(directory / "config.yaml"), [], saved=True)
            checkpoint = None
            if has_checkpoint(directory / "checkpoints"):
                checkpoint = _resume_checkpoint(directory, config)
            else:
                _start_over(directory)
        runner = Runner(config, directory, checkpoint) if checkpoint else Runner(config, directory)
        runner.run()
        return dict(runner.summary)

    summary = with_retries(directory, retries, attempt)
    write_text_atomic(directory / SUMMARY_FILE, json.dumps(summary, indent=2))
    print(json.dumps(summary), flush=True)
    return 0
