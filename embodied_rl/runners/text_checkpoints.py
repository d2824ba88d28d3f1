"""How a text run writes checkpoints: the trainer's state beside the counters, written by the trainer itself where it
runs on the driver's machine; and the stop checkpoint of a run that stops early, at an iteration's boundary.

``TextCheckpoints`` is a part of ``ReasoningRunner`` (which it is mixed into): it reads the runner's ``config``,
``run_dir``, ``iteration``, ``responses``, ``evaluations``, ``actor``, ``_boundary`` (what ``begin_iteration``
recorded) and calls its ``_actor`` and ``_env_state``."""

from __future__ import annotations

import sys
from pathlib import Path

import ray

from embodied_rl.config.reasoning import reasoning_yaml
from embodied_rl.runners.weight_sync import get_failing_fast
from embodied_rl.utils.checkpoint import save_checkpoint, save_checkpoint_with

STOP_CHECKPOINT_TIMEOUT_S = 300.0
"""How long a stop checkpoint waits for the trainer (an update in flight finishes first)."""


class TextCheckpoints:
    def _stop_checkpoint(self, failure: BaseException | None) -> None:
        """Keep what was trained when the loop stops early (``failure`` None: an interrupt): a stop checkpoint
        ``checkpoints/interrupted_iter_N``, exact at an iteration's boundary. Before the iteration's update began:
        the trainer as the iteration started, with the env's prompt sampler and the response count as they were
        then (the round sampled so far is dropped). Once it began: the update finishes on the trainer first (its
        calls run in order) and the checkpoint is of the iteration after it, the sampler as the round left it. A
        ``--resume`` from it continues as the uninterrupted run would. Nothing is written before RL's first
        iteration, or when the trainer is gone."""
        boundary = getattr(self, "_boundary", None)
        if boundary is None:
            return
        if self.iteration > boundary["iteration"] or _updated(boundary["update"]):
            iteration, responses, env_state = boundary["iteration"] + 1, self.responses, None
        else:
            iteration, responses, env_state = boundary["iteration"], boundary["responses"], boundary["env_state"]
        if iteration == 0:
            return
        reason = "interrupt" if failure is None else f"failure: {type(failure).__name__}: {_first_line(failure)}"
        counters = {"iteration": iteration, "env_steps": responses, "task": self.config.task,
                    "eval": self.evaluations, "interrupted": True, "stop_reason": reason}
        try:
            path = self._write_checkpoint(iteration, counters, env_state or self._env_state(),
                                          STOP_CHECKPOINT_TIMEOUT_S, stopped=True)
        except BaseException as error:  # a dead or hung trainer: the last scheduled checkpoint stays the newest
            print(f"{reason}; no stop checkpoint written: {type(error).__name__}: {_first_line(error)}",
                  file=sys.stderr, flush=True)
            return
        print(f"{reason}; stop checkpoint written: {path}", file=sys.stderr, flush=True)

    def _write_checkpoint(self, iteration: int, counters: dict, env_state: list | None, timeout_s: float,
                          stopped: bool = False) -> Path:
        """The trainer's state beside ``counters`` as a checkpoint of ``iteration``. Where trainer rank 0 runs on
        this machine it writes its files into the staging directory itself (nothing passes through Ray or this
        process's memory: the optimizer state of a 1.5B model is 12 GB); elsewhere its state comes here by Ray."""
        keep_last, config_yaml = self.config.checkpoint.keep_last, reasoning_yaml(self.config)
        if self._trainer_is_local():
            def write(staging: Path) -> None:
                get_failing_fast(self._actor("write_training_state", str(staging)), timeout_s,
                                 "the trainer writing its checkpoint files")

            return save_checkpoint_with(self.run_dir / "checkpoints", iteration, write, counters, config_yaml,
                                        keep_last, env_state, stopped)
        state = get_failing_fast(self._actor("training_state"), timeout_s, "the trainer's state")[0]
        return save_checkpoint(self.run_dir / "checkpoints", iteration, state["weights"], state["trainer_state"],
                               counters, config_yaml, keep_last, env_state, stopped)

    def _trainer_is_local(self) -> bool:
        """Whether trainer rank 0 runs on this machine (asked once)."""
        if getattr(self, "_trainer_local", None) is None:
            address = get_failing_fast(self.actor.call("node_address", ranks=[0]),
                                       self.config.fault.hang_timeout_s, "the trainer's node address")[0]
            self._trainer_local = address == ray.util.get_node_ip_address()
        return self._trainer_local


def _updated(update) -> bool:
    """Whether the trainer's call ``update`` (the futures of an ``rl_update_round``, or None) updated the model: it
    finishes first (the trainer's calls run in order); one that only kept its round for a later update did not.
    A call that failed counts as updated, so its checkpoint is never taken for the iteration's start."""
    if update is None:
        return False
    try:
        return not get_failing_fast(update, STOP_CHECKPOINT_TIMEOUT_S, "the trainer's update")[0].get(
            "train/needs_more")
    except BaseException:  # noqa: BLE001 - a failed update: see above
        return True


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else ""
