"""An inbox's ``(channel, key)`` queues: filled by its receiving threads, emptied by the owner's ``take``.

Thread safe: one lock guards every queue, each key has its own condition on it (a ``take`` waits only for its
key). The optional load cell of a key (``reader_load.ReaderLoad``) is written under the same lock whenever that
key's backlog or busy state changes, so senders on the node see the backlog the moment items arrive.
"""

from __future__ import annotations

import threading
from collections import deque


class Undeliverable:
    """Stands in a queue for a message that arrived but could not be decoded; ``take`` raises its error."""

    def __init__(self, error: BaseException):
        self.error = error


class KeyedQueues:
    def __init__(self):
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, str], deque] = {}
        self._conditions: dict[tuple[str, str], threading.Condition] = {}
        self._loads: dict[tuple[str, str], object] = {}
        self._busy: dict[tuple[str, str], bool] = {}

    def _queue(self, name: tuple[str, str]) -> deque:
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queues[name] = deque()
            self._conditions[name] = threading.Condition(self._lock)
        return queue

    def _publish_load(self, name: tuple[str, str]) -> None:
        load = self._loads.get(name)
        if load is not None:
            load.update(len(self._queues.get(name, ())), self._busy.get(name, False))

    def append(self, name: tuple[str, str], item) -> None:
        with self._lock:
            self._queue(name).append(item)
            self._publish_load(name)
            self._conditions[name].notify()

    def take(self, name: tuple[str, str], max_items: int, timeout: float | None) -> list:
        """Wait up to ``timeout`` s (None: no limit) for an item, then take what is queued, up to ``max_items``;
        [] if none came. Items that could not be decoded raise their error in turn."""
        with self._lock:
            queue = self._queue(name)
            self._busy[name] = False
            self._publish_load(name)
            if not queue:
                self._conditions[name].wait_for(lambda: queue, timeout)
            items = []
            while queue and len(items) < max_items:
                if isinstance(queue[0], Undeliverable):
                    if items:
                        break  # raise it at the next take, after these are handled
                    error = queue.popleft().error
                    self._publish_load(name)
                    raise RuntimeError(f"a message for key {name[1]!r} on channel {name[0]!r} arrived but could "
                                       f"not be decoded: {error!r}") from error
                items.append(queue.popleft())
            if items:
                self._busy[name] = True
            self._publish_load(name)
            return items

    def size(self, name: tuple[str, str]) -> int:
        with self._lock:
            return len(self._queues.get(name, ()))

    def watch(self, name: tuple[str, str], load) -> None:
        """Publish ``name``'s backlog and busy state in ``load`` (None: stop)."""
        with self._lock:
            if load is None:
                self._loads.pop(name, None)
            else:
                self._loads[name] = load
                self._publish_load(name)
