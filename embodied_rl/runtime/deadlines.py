"""Waits on workers with a deadline: when it expires, the error names what was waited for, in one line."""

from __future__ import annotations

import time

import ray


class DeadlineExceeded(TimeoutError):
    """A wait on workers ran past its deadline; the message names what it waited for."""


class WorkerStartError(RuntimeError):
    """Workers of a group did not finish constructing: a constructor raised, or Ray could not place them before
    the start deadline. The message names the group, the ranks and the resources Ray had."""


def one_line(error) -> str:
    """``Type: first sentence`` of an error (Ray's errors run to paragraphs; a task's error is its cause's)."""
    cause = getattr(error, "cause", None)
    if isinstance(error, ray.exceptions.RayTaskError) and isinstance(cause, BaseException):
        error = cause
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text.split('. ')[0]}"[:300]


def get_within(refs, timeout_s: float, what: str):
    """``ray.get(refs)``, raising ``DeadlineExceeded`` naming ``what`` after ``timeout_s`` seconds (errors of the
    calls themselves, e.g. ``RayActorError`` of a dead worker, pass through)."""
    try:
        return ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise DeadlineExceeded(f"{what} did not finish within {timeout_s:g} s") from None


def wait_all_within(refs: list, timeout_s: float) -> tuple[list, list]:
    """``(finished, unfinished)`` of ``refs`` after waiting at most ``timeout_s`` seconds for all of them."""
    if not refs:
        return [], []
    return ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s, fetch_local=False)


class HeartbeatWatch:
    """Tells hung workers from slow ones while they are inside a long call (a sampling round).

    Each ``poll`` asks every watched worker without a heartbeat in flight for one: ``heartbeat()``, a method in a
    concurrency group of its own, answers while the long call runs with ``{"progress": n, "waiting": bool}``
    (``progress`` grows as the worker gets on; ``waiting``: it waits for another worker). A worker is hung after
    ``timeout_s`` seconds in which it did not answer at all (a stopped or wedged process: SIGSTOP, a deadlock that
    holds the interpreter), or answered but made no progress while not waiting for another worker. A slow worker
    that still progresses is never hung, however long its call takes.
    """

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.poll_s = min(max(timeout_s / 5, 0.2), 5.0)
        self._watched: dict = {}  # key -> {"handle", "ref", "answered_at", "progress", "progress_at", "waiting"}
        self._next_poll = time.monotonic() + self.poll_s

    def watch(self, key, handle) -> None:
        """Start watching ``handle`` (a Ray actor with ``heartbeat``) under ``key`` (e.g. ``("env", 3)``)."""
        now = time.monotonic()
        self._watched[key] = {"handle": handle, "ref": None, "answered_at": now, "progress": None,
                              "progress_at": now, "waiting": False}

    def forget(self, key) -> None:
        self._watched.pop(key, None)

    def due(self) -> bool:
        return time.monotonic() >= self._next_poll

    def wait_s(self) -> float:
        """Seconds until the next poll is due."""
        return max(self._next_poll - time.monotonic(), 0.0)

    def poll(self) -> list[tuple]:
        """Read the heartbeats that came, ask for new ones; returns ``(key, reason)`` of each hung worker (no longer
        watched)."""
        now = time.monotonic()
        self._next_poll = now + self.poll_s
        in_flight = {w["ref"]: key for key, w in self._watched.items() if w["ref"] is not None}
        answered, _ = ray.wait(list(in_flight), num_returns=len(in_flight), timeout=0) if in_flight else ([], [])
        for ref in answered:
            watched = self._watched[in_flight[ref]]
            watched["ref"] = None
            try:
                beat = get_within(ref, self.timeout_s, "a heartbeat already answered")
            except (ray.exceptions.RayError, DeadlineExceeded):
                continue  # dead: its own call reports that
            watched["answered_at"], watched["waiting"] = now, bool(beat["waiting"])
            if beat["progress"] != watched["progress"]:
                watched["progress"], watched["progress_at"] = beat["progress"], now
        hung = []
        for key, watched in list(self._watched.items()):
            silent, still = now - watched["answered_at"], now - watched["progress_at"]
            if silent >= self.timeout_s:
                hung.append((key, f"did not answer its heartbeat for {silent:.0f} s"))
            elif still >= self.timeout_s and not watched["waiting"]:
                hung.append((key, f"made no progress for {still:.0f} s"))
            elif watched["ref"] is None:
                watched["ref"] = watched["handle"].heartbeat.remote()
        for key, _ in hung:
            self.forget(key)
        return hung
