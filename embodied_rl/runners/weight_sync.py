"""Weights from the actor to the rollout workers: through Ray's object store, or a collective broadcast group that
is formed anew when a member was replaced (a mixin of ``EmbodiedWorkers``)."""

from __future__ import annotations

import sys

import ray

from embodied_rl.runtime.deadlines import get_within

WEIGHTS_COLLECTIVE = "weights"

BROADCAST_RECOVERY_S = 10.0
"""After a weight broadcast failed, how long its surviving members may take to finish before they count as stuck
in the broken collective (and are replaced too)."""


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
    """Weight sync of ``EmbodiedWorkers`` (its ``actor``, ``rollout``, ``broadcast_*`` and ``weights_synced`` fields;
    a dead rollout worker is replaced through its ``_replace_rollout``)."""

    def _full_weights(self):
        """Reference to ``(weights, version)`` for a new rollout worker: the actor's, frozen ones included (without
        an actor, as in ``embodied-rl eval``: the weights last installed)."""
        return self.actor.workers[0].get_weights.remote(False) if self.actor else self.installed_weights

    def _reform_weight_broadcast(self, new_members: bool = True) -> None:
        """A new collective for the actor and the current rollout workers (members that left or died are in the
        old one, which every survivor leaves)."""
        survivors = [self.actor.workers[0], *self.rollout.workers]
        get_within([worker.leave_collective.remote(self.weights_collective) for worker in survivors],
                   self.hang_timeout_s, f"leaving the weight collective {self.weights_collective!r}")
        self.broadcast_generation += 1
        self.form_weight_broadcast()
        if new_members:
            self.weights_synced = False  # a new member holds no frozen weights yet

    def form_weight_broadcast(self) -> None:
        """Make the actor (rank 0) and the rollout workers one collective group for weight broadcasts: NCCL when
        the actor computes on a GPU, gloo otherwise."""
        from embodied_rl.runtime.collective import form_collective

        device = get_within(self.actor.workers[0].device_name.remote(), self.hang_timeout_s, "the actor's device")
        form_collective(self.weights_collective, [self.actor.workers[0], *self.rollout.workers],
                        backend="nccl" if device.startswith("cuda") else "gloo")
        self.broadcast_formed = True

    @property
    def weights_collective(self) -> str:
        return f"{WEIGHTS_COLLECTIVE}:{self.broadcast_generation}"

    def broadcast_weights(self) -> int:
        """Actor -> every rollout worker through the collective group; returns the version they installed. After
        the first sync only trained weights travel (frozen ones, e.g. a LoRA base, are already in place)."""
        self._replace_dead_rollout_workers()
        only_trained = self.weights_synced
        sent = self.actor.call("broadcast_weights", self.weights_collective, only_trained)
        received = self.rollout.call("receive_weights", self.weights_collective, only_trained)
        try:
            versions = get_within(sent + received, self.update_timeout_s, "the weight broadcast")
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as error:
            self._recover_broadcast(sent[0], received, error)
            return self.broadcast_weights()  # on the new group
        if len(set(versions)) != 1:
            raise RuntimeError(f"weight broadcast left mixed policy versions {versions}")
        self.weights_synced = True
        return versions[0]

    def _replace_dead_rollout_workers(self) -> None:
        """Before a broadcast: a rollout worker that died since the last round (or does not answer within
        ``BROADCAST_RECOVERY_S``) would break the collective for all members (the live ones would wait in it until its
        timeout), so it is replaced and the group formed anew."""
        pings = [worker.process_id.remote() for worker in self.rollout.workers]
        _, unanswered = ray.wait(pings, num_returns=len(pings), timeout=BROADCAST_RECOVERY_S)
        lost = [rank for rank, ping in enumerate(pings) if ping in unanswered or _died(ping)]
        for rank in lost:
            if pings[rank] in unanswered:  # alive but not answering: it would hang the broadcast
                print(f"rollout worker {rank} did not answer in {BROADCAST_RECOVERY_S:.0f} s; replacing it",
                      file=sys.stderr, flush=True)
                ray.kill(self.rollout.workers[rank], no_restart=True)
            self._replace_rollout(rank, ray.exceptions.RayActorError())
        if lost:
            self._reform_weight_broadcast()

    def _recover_broadcast(self, sent, received: list, error) -> None:
        """A rollout worker died before or during a broadcast, which breaks the collective for every member: replace
        it (with the actor's weights), and also any member still stuck in the broken broadcast after
        ``BROADCAST_RECOVERY_S``; then form a new group. A dead actor, or a failure with no dead rollout worker,
        is raised."""
        _, pending = ray.wait([sent, *received], num_returns=len(received) + 1, timeout=BROADCAST_RECOVERY_S)
        if sent in pending or _died(sent):
            raise error
        dead = [rank for rank, future in enumerate(received) if future not in pending and _died(future)]
        if not dead:
            raise error
        stuck = [rank for rank, future in enumerate(received) if future in pending]
        for rank in stuck:
            print(f"rollout worker {rank} is stuck in the broken weight broadcast; replacing it", file=sys.stderr,
                  flush=True)
            ray.kill(self.rollout.workers[rank], no_restart=True)
        for rank in sorted(dead + stuck):
            self._replace_rollout(rank, error)
        self._reform_weight_broadcast()

    def publish_weights(self):
        """The actor's ``(weights, version)`` copied to the object store (host memory); returns its reference.
        After the first publication only trained weights travel (see ``broadcast_weights``)."""
        return self.actor.call("get_weights", self.weights_synced)[0]

    def install_weights(self, weights_ref) -> int:
        """Load published weights into every rollout worker; returns their policy version."""
        version = self.call_rollout("load_weights", weights_ref)[0]
        self.installed_weights = weights_ref
        self.weights_synced = True
        return version
