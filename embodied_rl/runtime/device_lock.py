"""A lock per device slot of the cluster, taken several slots at a time, from the driver or any worker process.

Components that share device slots take turns: a holder takes all the slots it needs at once (all or none),
uses them, and releases them. The lock keeps a record of every turn (holder, slots, when it was requested,
acquired and released) for the driver and tests to read.

Why a small asyncio Ray actor (``DeviceLockState``), one per cluster session and lock name:

* every process on every node can reach a named actor, and every handle pickles, so the lock works across nodes;
* an ``async def acquire`` parks the request on an ``asyncio.Future`` that ``release`` resolves: a waiter wakes
  on the next event-loop turn, with no polling traffic and no polling delay, and one event-loop thread mutates
  all state, so the actor needs no locks of its own;
* timeouts run inside the actor (``asyncio.wait_for``), so a waiter that gives up is removed from the queue in
  the same step; a client-side timeout would leave a ghost waiter that is granted later and never released;
* one clock (the actor's) stamps every turn, so intervals from different nodes compare without clock skew.

Granting rule: waiters form one FIFO queue. A waiter is granted when all its slots are free and no earlier
waiter still in the queue wants any of them. Grants are atomic and a waiter holds nothing while it waits, so
two holders needing overlapping slot sets can never deadlock; an earlier waiter is never overtaken on a slot it
wants, so nobody starves; a waiter for unrelated slots is not held up by others.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Hashable, Iterable, Iterator

import ray

LOCK_ACTOR_PREFIX = "embodied_rl_device_lock"


class DeviceLockError(RuntimeError):
    """The lock was used wrongly (releasing slots one does not hold, waiting for oneself); one line says how."""


class DeviceLockTimeout(DeviceLockError, TimeoutError):
    """A holder waited longer than its timeout; the message names who holds each wanted slot."""


@dataclass(frozen=True)
class TurnRecord:
    """One holder's turn on ``slots``; times are seconds on the lock actor's monotonic clock.

    ``released_at`` is None while the turn lasts.
    """

    holder: str
    slots: tuple
    requested_at: float
    acquired_at: float
    released_at: float | None = None

    @property
    def waited_s(self) -> float:
        return self.acquired_at - self.requested_at

    @property
    def held_s(self) -> float | None:
        return None if self.released_at is None else self.released_at - self.acquired_at


def _normalize(slots: Iterable[Hashable]) -> tuple:
    unique = tuple(sorted(set(slots), key=lambda slot: (str(type(slot)), slot)))
    if not unique:
        raise DeviceLockError("a turn needs at least one device slot")
    return unique


@dataclass
class _Waiter:
    holder: str
    slots: tuple
    requested_at: float
    granted: asyncio.Future


class DeviceLockState:
    """The lock's state, run as an asyncio Ray actor; use it through ``DeviceLock``.

    Methods return ``("ok", value)`` or ``(error_kind, message)`` instead of raising, so the client can raise
    a clean ``DeviceLockTimeout`` / ``DeviceLockError`` instead of Ray's wrapped remote traceback.
    """

    def __init__(self, keep_last: int = 100_000):
        self._holders: dict[Hashable, int] = {}  # slot -> index of the holding turn in _turns
        self._queue: list[_Waiter] = []
        self._turns: deque[TurnRecord] = deque(maxlen=keep_last)
        self._first_index = 0  # index of _turns[0] among all turns ever granted
        self._open: dict[int, TurnRecord] = {}  # turn index -> record, for turns not yet released

    async def acquire(self, slots: tuple, holder: str, timeout: float | None):
        slots = _normalize(slots)
        mine = [self._open[i].slots for i in self._open if self._open[i].holder == holder]
        mine += [w.slots for w in self._queue if w.holder == holder]
        if any(set(slots) & set(held) for held in mine):
            return "error", (f"holder {holder!r} already holds or waits for some of slots {list(slots)}; "
                             "a holder cannot wait for itself")
        waiter = _Waiter(holder, slots, time.monotonic(), asyncio.get_running_loop().create_future())
        self._queue.append(waiter)
        self._grant_ready()
        try:
            index = await asyncio.wait_for(asyncio.shield(waiter.granted), timeout)
        except asyncio.CancelledError:  # the caller's task was cancelled: leave no ghost waiter or grant
            await self.cancel(slots, holder)
            raise
        except asyncio.TimeoutError:
            if waiter.granted.done():  # granted in the same loop turn as the timeout fired: keep it
                return "ok", self._open[waiter.granted.result()]
            self._queue.remove(waiter)
            self._grant_ready()  # this waiter may have been holding up later ones
            return "timeout", self._timeout_message(waiter, timeout)
        return "ok", self._open[index]

    async def release(self, slots: tuple, holder: str):
        slots = _normalize(slots)
        for index, record in self._open.items():
            if record.holder == holder and record.slots == slots:
                break
        else:
            held = {str(s): self._open[i].holder for s, i in self._holders.items()}
            return "error", (f"holder {holder!r} does not hold slots {list(slots)} as one turn; "
                             f"slot holders now: {held or 'none'}")
        finished = replace(record, released_at=time.monotonic())
        del self._open[index]
        if index >= self._first_index:
            self._turns[index - self._first_index] = finished
        for slot in slots:
            del self._holders[slot]
        self._grant_ready()
        return "ok", finished

    async def cancel(self, slots: tuple, holder: str):
        """Forget a waiter, or release a grant, of a client that stopped waiting (e.g. on KeyboardInterrupt)."""
        slots = _normalize(slots)
        for waiter in self._queue:
            if waiter.holder == holder and waiter.slots == slots:
                self._queue.remove(waiter)
                waiter.granted.cancel()
                self._grant_ready()
                return "ok", None
        await self.release(slots, holder)
        return "ok", None

    async def turns(self) -> list[TurnRecord]:
        return list(self._turns)

    async def holders(self) -> dict:
        return {slot: self._open[index].holder for slot, index in self._holders.items()}

    async def waiting(self) -> list[tuple[str, tuple]]:
        return [(w.holder, w.slots) for w in self._queue]

    def _grant_ready(self) -> None:
        wanted_earlier: set = set()  # slots of earlier waiters that are still waiting: nobody overtakes them
        for waiter in list(self._queue):
            wanted = set(waiter.slots)
            if wanted & wanted_earlier or any(slot in self._holders for slot in wanted):
                wanted_earlier |= wanted
                continue
            self._queue.remove(waiter)
            if waiter.granted.cancelled():
                continue
            index = self._first_index + len(self._turns)
            if len(self._turns) == self._turns.maxlen:
                self._first_index += 1
            record = TurnRecord(waiter.holder, waiter.slots, waiter.requested_at, time.monotonic())
            self._turns.append(record)
            self._open[index] = record
            for slot in waiter.slots:
                self._holders[slot] = index
            waiter.granted.set_result(index)

    def _timeout_message(self, waiter: _Waiter, timeout: float) -> str:
        now = time.monotonic()
        busy = []
        for slot in waiter.slots:
            if slot in self._holders:
                record = self._open[self._holders[slot]]
                busy.append(f"slot {slot} held by {record.holder!r} for {now - record.acquired_at:.1f} s")
        ahead = [f"{w.holder!r} {list(w.slots)}" for w in self._queue if set(w.slots) & set(waiter.slots)]
        reason = "; ".join(busy) or "its slots were free but earlier waiters wanted them"
        queued = f"; queued ahead: {', '.join(ahead)}" if ahead else ""
        return (f"holder {waiter.holder!r} timed out after {timeout:g} s waiting for device slots "
                f"{list(waiter.slots)}: {reason}{queued}")


class DeviceLock:
    """Client of a session's device lock; pickles, so workers on any node can take turns with it.

    >>> lock = DeviceLock.create(cluster.session_id)
    >>> with lock.hold([0, 1], "actor", timeout=60):
    ...     ...  # the actor alone uses slots 0 and 1 here
    """

    def __init__(self, actor, name: str):
        self._actor = actor
        self.name = name

    @classmethod
    def create(cls, session_id: str, name: str = "devices") -> "DeviceLock":
        """The lock named ``name`` of this cluster session (created on first use, shared after that)."""
        full_name = f"{LOCK_ACTOR_PREFIX}-{session_id}-{name}"
        actor = ray.remote(DeviceLockState).options(name=full_name, get_if_exists=True, num_cpus=0,
                                                   max_concurrency=1000).remote()
        return cls(actor, full_name)

    def acquire(self, slots: Iterable[Hashable], holder: str, timeout: float | None = None) -> TurnRecord:
        """Block until ``holder`` holds every slot in ``slots`` (all at once); raises ``DeviceLockTimeout``."""
        slots = _normalize(slots)
        try:
            status, value = ray.get(self._actor.acquire.remote(slots, holder, timeout))
        except BaseException:
            # Interrupted while waiting (Ctrl-C, a killed task): leave no ghost waiter or grant behind.
            try:
                ray.get(self._actor.cancel.remote(slots, holder), timeout=10)
            except Exception:
                pass  # the lock itself is gone; the original error says more
            raise
        return self._unwrap(status, value)

    def release(self, slots: Iterable[Hashable], holder: str) -> TurnRecord:
        """End ``holder``'s turn on exactly ``slots``; returns the finished record."""
        return self._unwrap(*ray.get(self._actor.release.remote(_normalize(slots), holder)))

    @contextmanager
    def hold(self, slots: Iterable[Hashable], holder: str, timeout: float | None = None) -> Iterator[TurnRecord]:
        record = self.acquire(slots, holder, timeout)
        try:
            yield record
        finally:
            self.release(record.slots, holder)

    def turns(self) -> list[TurnRecord]:
        """Every turn granted so far, in grant order (the newest ``keep_last`` of them)."""
        return ray.get(self._actor.turns.remote())

    def holders(self) -> dict:
        """Slot -> holder, for slots held now."""
        return ray.get(self._actor.holders.remote())

    def waiting(self) -> list[tuple[str, tuple]]:
        """``(holder, slots)`` of waiters, first in line first."""
        return ray.get(self._actor.waiting.remote())

    def close(self) -> None:
        """Stop the lock actor (its record goes with it)."""
        ray.kill(self._actor)

    @staticmethod
    def _unwrap(status: str, value):
        if status == "ok":
            return value
        raise (DeviceLockTimeout if status == "timeout" else DeviceLockError)(value)
