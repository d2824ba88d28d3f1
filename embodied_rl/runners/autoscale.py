"""Autoscaling from measured waits: which side of sampling waits for the other decides which side grows.

Each sampling round, env workers report the seconds they spent simulating and waiting for actions, and rollout
workers the seconds they spent inferring and waiting for requests. Over a window of ``every_iterations``
iterations:

* rollout workers idle more than ``threshold`` of their time: there is spare inference, and more env workers use it
  (an env worker has at most one request per pipeline stage in flight, so more rollout workers cannot; when the
  two sides take turns, each waiting half the time, this adds the overlap): add an env worker (under GRPO as many
  as keep the groups whole);
* env workers wait for actions more than ``threshold`` while rollout workers are busy: inference is the bottleneck,
  add a rollout worker;
* rollout workers idle and env workers already at their maximum: remove a rollout worker (it holds a slot for
  nothing);
* neither side waiting: no change.

Sizes stay within ``[min, max]``; the default maximum is the slots the placement gives the component (or the
current size, if larger). The window starts again after every change, so a decision is never based on rounds
measured at an older size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def wait_shares(env_seconds: list[dict], rollout_counters: list[dict]) -> dict:
    """Mean share of each env worker's round spent waiting for actions (``waiting_for_actions_s`` over it plus
    ``simulating_s``) and of each rollout worker's spent waiting for requests (``waiting_s`` over it plus
    ``inferring_s``): ``{"time/env_waiting_share", "time/rollout_idle_share"}``; {} without measurements."""
    def share(rows: list[dict], waiting: str, working: str) -> float | None:
        parts = [row[waiting] / (row[waiting] + row[working]) for row in rows if row[waiting] + row[working] > 0]
        return float(np.mean(parts)) if parts else None

    env = share(env_seconds, "waiting_for_actions_s", "simulating_s")
    rollout = share(rollout_counters, "waiting_s", "inferring_s")
    if env is None or rollout is None:
        return {}
    return {"time/env_waiting_share": env, "time/rollout_idle_share": rollout}


@dataclass
class Limits:
    min_env: int
    max_env: int
    min_rollout: int
    max_rollout: int
    env_step: int = 1  # env workers added or removed at once (GRPO: whole groups)


def decide(env_waiting: float, rollout_idle: float, env_workers: int, rollout_workers: int, limits: Limits,
           threshold: float) -> tuple[dict, str] | None:
    """The resize the measured shares call for, as ``({"env": n} or {"rollout": m}, reason)``, or None."""
    shares = f"env workers wait for actions {env_waiting:.0%} of a round, rollout workers idle {rollout_idle:.0%}"
    if rollout_idle > threshold:
        if env_workers + limits.env_step <= limits.max_env:
            return {"env": env_workers + limits.env_step}, f"{shares}: spare inference for more env workers"
        if rollout_workers > limits.min_rollout:
            return {"rollout": rollout_workers - 1}, f"{shares}, env workers at their maximum: a rollout worker idles"
        return None
    if env_waiting > threshold and rollout_workers < limits.max_rollout:
        return {"rollout": rollout_workers + 1}, f"{shares}: inference is the bottleneck"
    return None


def env_step(envs_per_worker: int, group_size: int | None) -> int:
    """Env workers that keep GRPO groups whole when added together (1 without groups)."""
    return group_size // math.gcd(group_size, envs_per_worker) if group_size else 1


class Autoscaler:
    """Collects each round's wait shares; every ``every_iterations`` iterations proposes a resize (see ``decide``)."""

    def __init__(self, limits: Limits, threshold: float, every_iterations: int):
        self.limits = limits
        self.threshold = threshold
        self.every_iterations = every_iterations
        self.window: list[dict] = []

    def observe(self, shares: dict) -> None:
        if shares:
            self.window.append(shares)

    def restart(self) -> None:
        """Forget the window (the sizes changed: its rounds were measured at the old ones)."""
        self.window = []

    def proposal(self, env_workers: int, rollout_workers: int) -> tuple[dict, str] | None:
        """A resize once the window is full (the window then starts again), else None."""
        if len(self.window) < self.every_iterations:
            return None
        env = float(np.mean([s["time/env_waiting_share"] for s in self.window]))
        rollout = float(np.mean([s["time/rollout_idle_share"] for s in self.window]))
        self.restart()
        return decide(env, rollout, env_workers, rollout_workers, self.limits, self.threshold)
