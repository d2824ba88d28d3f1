"""Weights from the trainer to the samplers, one object for embodied and text runs: the actor's rank 0 sends to
the rollout workers (embodied) or the generation workers (text), through Ray's object store or a collective
broadcast group that is formed anew when a sampler was replaced or added."""

from __future__ import annotations

import sys
import time
from typing import Callable

import ray

from embodied_rl.runtime.deadlines import get_within

WEIGHTS_COLLECTIVE = "weights"

BROADCAST_RECOVERY_S = 10.0
"""After a weight broadcast failed, how long its surviving members may take to finish before they count as stuck
in the broken collective (and are replaced too); also how long a sampler may take to answer the ping before a
broadcast (unless the run gives it longer: a generation worker may still be generating)."""


def get_failing_fast(futures: list, timeout_s: float, what: str) -> list:
    """``get_within(futures)``, raising the first failure as soon as it happens: a member that fails before the
    broadcast must not leave the others waiting in the collective until its timeout."""
    deadline = time.monotonic() + timeout_s
    pending = list(futures)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=max(deadline - time.monotonic(), 0))
        if not ready:
            break
        get_within(ready, BROADCAST_RECOVERY_S, f"the result of a finished call of {what}")  # raises its failure
    return get_within(futures, max(deadline - time.monotonic(), 0.001), what)


def _died(future) -> bool:
    """Whether the finished call behind ``future`` failed because its worker died."""
    try:
        get_within(future, BROADCAST_RECOVERY_S, "the result of a finished weight-sync call")
        return False
    except ray.exceptions.RayActorError:
        return True
    except ray.exceptions.RayTaskError:
        return False


class WeightSync:
    """The trainer's weights and policy version to every sampler.

    ``trainer``: the trainer's ``WorkerGroup`` (None where nothing trains, as in ``embodied-rl eval``: then the
    weights last installed are what a new sampler gets); every rank takes part in each call (a data-parallel
    trainer gathers the full model), rank 0 sends. ``samplers``: the sampling ``WorkerGroup``, resized and replaced
    in place by the run. ``replace_sampler(rank, error)``: the run's replacement of a dead sampler (it counts the
    restart and loads ``full_weights()`` into the new worker). ``call_samplers(method, *args)``: the run's call on
    every sampler with dead ones replaced (the object-store path). Trainers have ``get_weights(only_trained)`` and
    ``broadcast_weights(collective, only_trained)``; samplers ``load_weights((weights, version))`` and
    ``receive_weights(collective, only_trained)``, each returning the version they hold (a data-parallel trainer's
    other ranks return None).
    """

    def __init__(self, trainer, samplers, replace_sampler: Callable, call_samplers: Callable,
                 call_timeout_s: float, update_timeout_s: float, ping_timeout_s: float = BROADCAST_RECOVERY_S,
                 name: str = WEIGHTS_COLLECTIVE):
        self.trainer, self.samplers = trainer, samplers
        self.replace_sampler, self.call_samplers = replace_sampler, call_samplers
        self.call_timeout_s, self.update_timeout_s = call_timeout_s, update_timeout_s
        self.ping_timeout_s = ping_timeout_s
        self.name = name
        self.synced = False  # the samplers hold the trainer's full weights (frozen ones included)
        self.formed = False  # a broadcast group exists
        self.group_generation = 0  # the broadcast group is formed anew after a sampler is replaced or added
        self.installed = None  # reference to the (weights, version) last installed through the object store

    @property
    def collective(self) -> str:
        return f"{self.name}:{self.group_generation}"

    def full_weights(self):
        """Reference to ``(weights, version)`` for a new sampler: the trainer's, frozen ones included (without a
        trainer: the weights last installed)."""
        return self.trainer.call("get_weights", False)[0] if self.trainer else self.installed

    def form(self) -> str:
        """Make trainer rank 0 (rank 0 of the group) and the samplers one collective group for broadcasts: NCCL
        when every member computes on a GPU, gloo otherwise; returns the backend."""
        from embodied_rl.runtime.collective import form_collective

        members = [self.trainer.workers[0], *self.samplers.workers]
        devices = get_within([m.device_name.remote() for m in members], self.call_timeout_s, "the members' devices")
        backend = "nccl" if all(d.startswith("cuda") for d in devices) else "gloo"
        form_collective(self.collective, members, backend=backend)
        self.formed = True
        return backend

    def reform(self, new_members: bool = True) -> None:
        """A new group for the trainer and the current samplers (members that left or died are in the old one,
        which every survivor leaves)."""
        survivors = [self.trainer.workers[0], *self.samplers.workers]
        get_within([worker.leave_collective.remote(self.collective) for worker in survivors], self.call_timeout_s,
                   f"leaving the weight collective {self.collective!r}")
        self.group_generation += 1
        self.form()
        if new_members:
            self.synced = False  # a new member holds no frozen weights yet

    def broadcast(self) -> int:
        """Trainer -> every sampler through the collective group; returns the version they installed. After the
        first sync only trained weights travel (frozen ones, e.g. a LoRA base, are already in place)."""
        self._replace_dead_samplers()
        only_trained = self.synced
        sent = self.trainer.call("broadcast_weights", self.collective, only_trained)
        received = self.samplers.call("receive_weights", self.collective, only_trained)
        try:
            versions = get_failing_fast(sent + received, self.update_timeout_s, "the weight broadcast")
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as error:
            self._recover_broadcast(sent[0], received, error)
            return self.broadcast()  # on the new group
        versions = [v for v in versions if v is not None]  # a data-parallel trainer's other ranks send nothing
        if len(set(versions)) != 1:
            raise RuntimeError(f"weight broadcast left mixed policy versions {versions}")
        self.synced = True
        return versions[0]

    def _replace_dead_samplers(self) -> None:
        """Before a broadcast: a sampler that died since the last sync (or does not answer within
        ``ping_timeout_s``) would break the collective for all members (the live ones would wait in it until its
        timeout), so it is replaced and the group formed anew."""
        pings = [worker.process_id.remote() for worker in self.samplers.workers]
        _, unanswered = ray.wait(pings, num_returns=len(pings), timeout=self.ping_timeout_s)
        lost = [rank for rank, ping in enumerate(pings) if ping in unanswered or _died(ping)]
        for rank in lost:
            if pings[rank] in unanswered:  # alive but not answering: it would hang the broadcast
                print(f"{self.samplers.name} worker {rank} did not answer in {self.ping_timeout_s:.0f} s; replacing "
                      "it", file=sys.stderr, flush=True)
                ray.kill(self.samplers.workers[rank], no_restart=True)
            self.replace_sampler(rank, ray.exceptions.RayActorError())
        if lost:
            self.reform()

    def _recover_broadcast(self, sent, received: list, error) -> None:
        """A sampler died before or during a broadcast, which breaks the collective for every member: replace it
        (with the trainer's weights), and also any member still stuck in the broken broadcast after
        ``BROADCAST_RECOVERY_S``; then form a new group. A dead trainer, or a failure with no dead sampler, is
        raised."""
        _, pending = ray.wait([sent, *received], num_returns=len(received) + 1, timeout=BROADCAST_RECOVERY_S)
        if sent in pending or _died(sent):
            raise error
        dead = [rank for rank, future in enumerate(received) if future not in pending and _died(future)]
        if not dead:
            raise error
        stuck = [rank for rank, future in enumerate(received) if future in pending]
        for rank in stuck:
            print(f"{self.samplers.name} worker {rank} is stuck in the broken weight broadcast; replacing it",
                  file=sys.stderr, flush=True)
            ray.kill(self.samplers.workers[rank], no_restart=True)
        for rank in sorted(dead + stuck):
            self.replace_sampler(rank, error)
        self.reform()

    def publish(self):
        """The trainer's ``(weights, version)`` copied to the object store (host memory); returns its reference.
        After the first publication only trained weights travel (see ``broadcast``)."""
        return self.trainer.call("get_weights", self.synced)[0]

    def install(self, weights_ref) -> int:
        """Load published weights into every sampler; returns their policy version."""
        versions = self.call_samplers("load_weights", weights_ref)
        if len(set(versions)) != 1:
            raise RuntimeError(f"weight sync left the samplers at mixed policy versions {versions}")
        self.installed = weights_ref
        self.synced = True
        return versions[0]

    def sync(self, broadcast: bool) -> int:
        """One sync by broadcast (the group formed on first use) or through the object store; returns the version
        the samplers hold."""
        if broadcast:
            if not self.formed:
                self.form()
            return self.broadcast()
        return self.install(self.publish())
