"""Turns on shared device slots in the synchronous loop: sampling (env + rollout workers), then training (actor).

The driver schedules, so the driver holds the device lock on behalf of the phase whose turn it is:

* a sampling turn holds the env and rollout slots: rollout workers onload, install the newest published
  weights, serve the env workers, and offload when the turn ends;
* a training turn holds the actor's slots: the actor onloads, trains (or loads or saves a checkpoint),
  publishes its weights, and offloads when the turn ends.

Weight sync: the actor publishes at the end of its turn (``get_weights`` copies them into Ray's object store, in
host memory), and the rollout workers install that copy at the start of the next sampling turn, after onload.
Each side touches its device only in its own turn; between turns the weights live in host memory only, so the
sync never needs the two sides on one device at once.

When sampling and training slots do not overlap (disaggregated placement, or env+rollout on some slots and the
actor on others) there is nothing to take turns over: ``start`` gives each phase its slots for the whole run, the
per-phase contexts take no lock, and nothing is offloaded. Env workers are never offloaded: CPU simulators hold
no device memory (GPU simulator state would need snapshot/respawn, not a tensor move).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import ray

from embodied_rl.runtime.device_lock import DeviceLock

TURN_TIMEOUT_S = 600.0
"""How long a phase waits for its slots before failing with the name of the holder (a stuck turn, not a slow one:
the loop itself never waits for a turn it did not just end)."""


class PhaseTurns:
    """Turn taking for ``workers`` (an ``EmbodiedWorkers`` with an actor) on ``lock``; see the module docstring."""

    def __init__(self, workers, lock: DeviceLock, offload: bool = True, timeout_s: float = TURN_TIMEOUT_S,
                 weight_sync: str = "auto"):
        slots = workers.placement.slots
        self.workers = workers
        self.lock = lock
        self.sampling_slots = tuple(sorted(set(slots["env"]) | set(slots["rollout"])))
        self.training_slots = tuple(slots["actor"])
        self.shared = bool(set(self.sampling_slots) & set(self.training_slots))
        self.offload = offload and self.shared
        # Phases that share slots are never both on the device, so weights cross through host memory between
        # turns; phases on their own slots are both live, so the actor broadcasts straight to the rollout workers.
        self.broadcast = weight_sync == "broadcast" or (weight_sync == "auto" and not self.shared)
        self.timeout_s = timeout_s
        self.timings: dict[str, float] = {}
        self._published = None  # reference to the newest (weights, version) in the object store
        self._installed = None
        self._whole_run: list[tuple[tuple, str]] = []

    def describe(self) -> str:
        sync = "weights by collective broadcast" if self.broadcast else "weights through the object store"
        return f"{self._describe_turns()}; {sync}"

    def _describe_turns(self) -> str:
        if not self.shared:
            return "sampling and training run on their own slots"
        moved = "the idle side is offloaded" if self.offload else "nothing is offloaded (placement.offload=never)"
        return f"sampling and training take turns on shared slots; {moved}"

    def start(self) -> None:
        """Before the first turn: offload everything that takes turns, or give disjoint phases their slots."""
        if self.broadcast:
            self.workers.form_weight_broadcast()
        if not self.shared:
            for slots, holder in ((self.sampling_slots, "sample"), (self.training_slots, "update")):
                self.lock.acquire(slots, holder, self.timeout_s)
                self._whole_run.append((slots, holder))
        elif self.offload:
            # Workers are built on their devices before turns exist; empty the devices in a turn of their own.
            all_slots = tuple(sorted(set(self.sampling_slots) | set(self.training_slots)))
            with self.lock.hold(all_slots, "start", self.timeout_s):
                ray.get(self.workers.rollout.call("offload") + self.workers.actor.call("offload"))

    @contextmanager
    def sampling(self, holder: str = "sample") -> Iterator[None]:
        """A turn for env and rollout workers, with the newest published weights installed."""
        with self._turn(self.sampling_slots, holder, self.workers.rollout):
            if self._published is not None and self._published is not self._installed:
                start = time.perf_counter()
                self.workers.install_weights(self._published)
                self._installed = self._published
                self._add("time/sync_install_s", time.perf_counter() - start)
            yield

    @contextmanager
    def training(self, holder: str = "update") -> Iterator[None]:
        """A turn for the actor."""
        with self._turn(self.training_slots, holder, self.workers.actor):
            yield

    def publish_weights(self) -> None:
        """In a training turn: broadcast the actor's weights to the rollout workers, or copy them to the object
        store for the next sampling turn."""
        start = time.perf_counter()
        if self.broadcast:
            self.workers.broadcast_weights()
            self._add("time/sync_broadcast_s", time.perf_counter() - start)
            return
        self._published = self.workers.publish_weights()
        ray.wait([self._published], fetch_local=False)  # published (in host memory) before the actor offloads
        self._add("time/sync_publish_s", time.perf_counter() - start)

    def pop_timings(self) -> dict[str, float]:
        """Seconds spent on lock calls, onloads, offloads and weight sync since the last call."""
        timings, self.timings = self.timings, {}
        return timings

    def close(self) -> None:
        for slots, holder in self._whole_run:
            self.lock.release(slots, holder)
        self._whole_run = []

    @contextmanager
    def _turn(self, slots: tuple, holder: str, group) -> Iterator[None]:
        if not self.shared:
            yield
            return
        start = time.perf_counter()
        self.lock.acquire(slots, holder, self.timeout_s)
        self._add("time/turn_lock_s", time.perf_counter() - start)
        interrupted = False
        try:
            if self.offload:
                self._timed("time/onload_s", group, "onload")
            yield
        except KeyboardInterrupt:
            interrupted = True  # the run is stopping: waiting for a busy worker to offload would only delay it
            raise
        finally:
            try:
                if self.offload and not interrupted:
                    self._timed("time/offload_s", group, "offload")
            finally:
                start = time.perf_counter()
                self.lock.release(slots, holder)
                self._add("time/turn_lock_s", time.perf_counter() - start)

    def _timed(self, key: str, group, method: str) -> None:
        start = time.perf_counter()
        if group is self.workers.rollout:
            self.workers.call_rollout(method)  # a dead rollout worker is replaced, not fatal
        else:
            ray.get(group.call(method))
        self._add(key, time.perf_counter() - start)

    def _add(self, key: str, seconds: float) -> None:
        self.timings[key] = self.timings.get(key, 0.0) + seconds
