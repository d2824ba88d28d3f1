"""Growing and shrinking the env and rollout groups of a live run between rounds, undone when a new worker
cannot start (a mixin of ``EmbodiedWorkers``)."""

from __future__ import annotations

import sys
import time

import ray

from embodied_rl.runners.autoscale import env_step
from embodied_rl.runtime.deadlines import DeadlineExceeded, WorkerStartError, get_within, one_line

MAX_WORKER_RESTARTS = 3
"""Replacements of one rank before the run gives up on it (a worker that dies every time is a bug, not bad luck)."""

REPLACEMENT_SEED_STRIDE = 1_000_003
"""A replacement env worker's seed moves by this much per incarnation: its episodes start from fresh states."""


def _new_worker_cpus(current: int, wanted: int) -> float | None:
    """CPUs that each worker added to a group declares to Ray: a share of what Ray has left, so that a worker
    added to a full cluster still starts (placement pins processes to cores; Ray's CPUs are bookkeeping here)."""
    if wanted <= current:
        return None
    share = float(ray.available_resources().get("CPU", 0.0)) / (wanted - current)
    return min(share, 1.0) if share >= 0.01 else 0.0  # Ray never schedules beyond its CPUs; zero always fits


class ScaleError(ValueError):
    """A resize request that cannot be carried out (e.g. it would split GRPO groups)."""


class ScaleRolledBack(ScaleError):
    """A resize whose new workers did not start (or did not take their layout) within the deadlines: undone, the
    run continues at its old sizes."""


class Resizing:
    """``resize`` of ``EmbodiedWorkers`` (its ``env`` and ``rollout`` groups, seeds and restart counters)."""

    def resize(self, env_workers: int | None = None, rollout_workers: int | None = None) -> dict:
        """Between sampling rounds (nothing in flight): grow or shrink the env and rollout groups; returns
        ``scale/...`` metrics. New env workers and the ones kept all take fresh seed streams, disjoint across the
        new set; GRPO groups stay whole (the new env total must be a multiple of the group size) and every member
        continues the groups' sequence of shared states. New rollout workers get the actor's weights.

        New env and rollout workers construct at the same time, while the kept env workers take their new layout.
        A new worker that fails to construct, or does not within ``fault.start_timeout_s`` (or a layout or weights
        call that misses ``fault.hang_timeout_s``), rolls the resize back: ``ScaleRolledBack``, and the groups are
        as they were (a group already shrunk stays shrunk) and ready for the next round."""
        start = time.perf_counter()
        before = (len(self.env), len(self.rollout))
        if self.inline and rollout_workers is not None:
            raise ScaleError(f"rollout={rollout_workers}: with rollout.inline=true each env worker runs its own "
                             f"policy and there are no rollout workers; allowed: scaling env workers")
        change_env = env_workers is not None and env_workers != len(self.env)
        change_rollout = rollout_workers is not None and rollout_workers != len(self.rollout)
        if change_env:
            per_worker = int(self.env.worker_kwargs["envs_per_worker"])
            group_size = self.env.worker_kwargs.get("group_size")
            if group_size and env_workers * per_worker % group_size:
                raise ScaleError(f"env={env_workers}: {env_workers * per_worker} envs do not form whole groups of "
                                 f"group_size={group_size}; allowed: a multiple of "
                                 f"{env_step(per_worker, group_size)} env workers")
        growths = {}
        try:
            layout = None
            if change_env:
                for rank in range(env_workers, len(self.env)):
                    self.restarts.pop(("env", rank), None)
                    self.steps_seen.pop(rank, None)
                seed, total = self._next_env_layout(env_workers)
                growths["env"] = self.env.begin_resize(env_workers, _new_worker_cpus(len(self.env), env_workers),
                                                       seed=seed, total_envs=total)
                layout = self._start_env_layout(seed, total, ranks=range(min(before[0], env_workers)))
            if change_rollout:
                for rank in range(rollout_workers, len(self.rollout)):
                    self.restarts.pop(("rollout", rank), None)
                growths["rollout"] = self.rollout.begin_resize(
                    rollout_workers, _new_worker_cpus(len(self.rollout), rollout_workers))
            if change_env:
                added_env = self.env.finish_resize(growths["env"])
                self.steps_seen.update(dict.fromkeys(added_env, 0))
                self._finish_env_layout(layout)
                if self.inline:  # the env workers are the samplers: new ones get the weights and join the group
                    self._give_weights(added_env, "env")
            if change_rollout:
                self._give_weights(self.rollout.finish_resize(growths["rollout"]), "rollout")
        except (WorkerStartError, DeadlineExceeded, ray.exceptions.RayError) as error:
            self._roll_back(before, growths)
            raise ScaleRolledBack(f"{one_line(error) if isinstance(error, ray.exceptions.RayError) else error}; "
                                  f"rolled back to env workers {len(self.env)}, rollout workers {len(self.rollout)}"
                                  ) from None
        return {"scale/env_workers": len(self.env), "scale/rollout_workers": len(self.rollout),
                "scale/resize_s": time.perf_counter() - start}

    def _give_weights(self, added: list[int], group: str) -> None:
        """New samplers ``added`` (ranks of ``self.rollout``) get the trainer's weights; the broadcast group, if
        formed, is formed anew for the resized set."""
        if added:
            source = self.weights.full_weights()
            get_within([self.rollout.workers[rank].load_weights.remote(source) for rank in added],
                       self.hang_timeout_s, f"new {group} workers {added}' weights")
        if self.weights.formed:
            self.weights.reform(len(added) > 0)

    def _next_env_layout(self, env_workers: int) -> tuple[int, int]:
        """``(seed, total envs)`` of the env group at ``env_workers`` workers: a fresh seed stream per resize."""
        self.scale_generation += 1
        seed = int(self.env.worker_kwargs["seed"]) + REPLACEMENT_SEED_STRIDE * (MAX_WORKER_RESTARTS + 1) \
            * self.scale_generation
        return seed, env_workers * int(self.env.worker_kwargs["envs_per_worker"])

    def _start_env_layout(self, seed: int, total: int, ranks) -> dict:
        """Give env workers ``ranks`` the layout ``(seed, total)`` (without waiting); for ``_finish_env_layout``."""
        group_size = self.env.worker_kwargs.get("group_size")
        progress = (get_within(self.env.workers[0].group_progress.remote(), self.hang_timeout_s,
                               "env worker 0's group progress") if group_size else None)
        return {"calls": self.env.call("relayout", seed, total, ranks=list(ranks)), "progress": progress}

    def _finish_env_layout(self, layout: dict) -> None:
        """Wait for ``_start_env_layout``'s calls; under GRPO, every member (new ones included) then continues the
        groups' sequence of shared states."""
        get_within(layout["calls"], self.hang_timeout_s, "the env workers' new layout (relayout)")
        if layout["progress"] is not None:
            get_within(self.env.call("set_group_progress", layout["progress"]), self.hang_timeout_s,
                       "the env workers' group progress")

    def _roll_back(self, before: tuple[int, int], growths: dict) -> None:
        """After a failed resize: undo growths still under way, shrink groups that grew back to their sizes
        ``before``, and lay the env workers out again for the size they end at."""
        for name, group in (("env", self.env), ("rollout", self.rollout)):
            if name in growths:
                group.abort_resize(growths[name])
        try:
            if len(self.rollout) > before[1]:
                self.rollout.resize(before[1])
            if ("rollout" in growths or self.inline and "env" in growths) and self.weights.formed:
                self.weights.reform()
            if len(self.env) > before[0]:
                self.env.resize(before[0])
            if "env" in growths:
                for rank in range(len(self.env), before[0]):
                    self.steps_seen.pop(rank, None)
                seed, total = self._next_env_layout(len(self.env))
                self._finish_env_layout(self._start_env_layout(seed, total, range(len(self.env))))
                self.env.worker_kwargs.update(seed=seed, total_envs=total)
        except (WorkerStartError, DeadlineExceeded, ray.exceptions.RayError) as error:
            print(f"warning: rolling back a resize: {one_line(error)}; a dead or hung worker is replaced in the "
                  f"next round", file=sys.stderr, flush=True)
