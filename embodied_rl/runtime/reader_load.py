"""How busy each reader of a channel key is, readable by senders on the same node without a message.

Every reader keeps, per key it reads, a tiny shared-memory cell it alone writes: ``[backlog, busy]`` (items it
has received and not yet taken; 1 from the moment it takes items until it asks for more). A sender picks the
reader with the least ``backlog + busy``, so an idle reader takes the next batch and a slow one is passed over.
Readers on other nodes have no cell there: a sender that has any of them rotates round-robin instead.

The inbox writes a reader's cell under its queue lock (its receiving thread when items arrive, the owner when it
takes them), so the two fields never mix two moments. When shared memory has no room for a cell, the reader
keeps a private one (``path`` None) and senders rotate round-robin for that key.
"""

from __future__ import annotations

import numpy as np

from embodied_rl.runtime.transports.shared_memory import DATA_OFFSET, create_segment, map_segment, remove_segment

CELL_BYTES = 16
_SEGMENT_SIZE = DATA_OFFSET + CELL_BYTES


class ReaderLoad:
    """The reader's own cell for one key."""

    def __init__(self, segment_prefix: str):
        try:
            self.path, _, self._mapping = create_segment(segment_prefix, CELL_BYTES)
            self._cell = np.frombuffer(self._mapping, np.int64, 2, DATA_OFFSET)
        except OSError:  # no room in shared memory: a private cell nobody else reads
            self.path, self._mapping = None, None
            self._cell = np.zeros(2, np.int64)

    def update(self, backlog: int, busy: bool) -> None:
        self._cell[0] = backlog
        self._cell[1] = int(busy)

    def close(self) -> None:
        if self.path is not None:
            remove_segment(self.path)


class ReaderLoads:
    """A sender's view of the cells of the readers on its node (mapped once, read at every put)."""

    def __init__(self):
        self._cells: dict[str, np.ndarray] = {}

    def load(self, path: str) -> int | None:
        """``backlog + busy`` of the reader whose cell is ``path``; None if it cannot be read here."""
        cell = self._cells.get(path)
        if cell is None:
            try:
                mapping = map_segment(path, _SEGMENT_SIZE, unlink=False)
            except (FileNotFoundError, ValueError):
                return None
            cell = self._cells[path] = np.frombuffer(mapping, np.int64, 2, DATA_OFFSET)
        return int(cell[0] + cell[1])


def least_loaded(readers: list, rotation: int, loads: ReaderLoads, node_id: str):
    """The reader to send to. ``readers``: ``(address, load cell path)`` pairs; ``rotation`` breaks ties
    (and is the whole choice when some reader is on another node)."""
    start = rotation % len(readers)
    order = readers[start:] + readers[:start]
    if any(address.node_id != node_id or path is None for address, path in order):
        return order[0]
    measured = [loads.load(path) for _, path in order]
    if any(value is None for value in measured):
        return order[0]
    return order[measured.index(min(measured))]
