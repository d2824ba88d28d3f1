"""Same-node transport: each process has one inbox, a Unix stream socket; senders keep a connection per inbox.

One socket hop per message (a Ray actor call costs several: ~3 ms per put+get round trip measured here against
~0.7 ms for a pipe), and the kernel's socket buffer gives bounded queues with back-pressure for free.
Large array payloads go through ``/dev/shm`` (see ``shared_memory``): the socket carries only their names.
"""

from __future__ import annotations

import os
import pickle
import socket
import uuid
from collections import defaultdict, deque
from multiprocessing.connection import Connection, wait

from embodied_rl.runtime.transports import shared_memory


class Inbox:
    """This process's receiving end: messages from every sender, sorted into ``(channel, key)`` queues."""

    def __init__(self, directory_path: str):
        self.address = os.path.join(directory_path, f"{uuid.uuid4().hex[:12]}.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.address)
        self._server.listen(256)
        self._connections: list[Connection] = []
        self.queues: dict[tuple[str, str], deque] = defaultdict(deque)

    def deliver(self, channel: str, key: str, item) -> None:
        """Enqueue directly (a sender in this same process: no copy, no socket)."""
        self.queues[(channel, key)].append(item)

    def pump(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` s for traffic and enqueue what arrived; False if nothing did."""
        ready = wait([self._server, *self._connections], timeout)
        for source in ready:
            if source is self._server:
                client, _ = self._server.accept()
                self._connections.append(Connection(client.detach()))
                continue
            try:
                channel, key, payload, descriptors = pickle.loads(source.recv_bytes())
            except (EOFError, OSError):
                self._connections.remove(source)
                source.close()
                continue
            self.queues[(channel, key)].append(shared_memory.decode(payload, descriptors))
        return bool(ready)

    def close(self) -> None:
        for connection in self._connections:
            connection.close()
        self._server.close()
        try:
            os.unlink(self.address)
        except FileNotFoundError:
            pass


class Outbox:
    """This process's sending end: one cached connection per destination inbox, and traffic counters."""

    def __init__(self):
        self._connections: dict[str, Connection] = {}
        self.counters = {"socket_messages": 0, "socket_bytes": 0, "shared_memory_buffers": 0,
                         "shared_memory_bytes": 0}

    def send(self, address: str, channel: str, key: str, item, shm_threshold: int | None) -> None:
        """Send ``item``; array buffers of at least ``shm_threshold`` bytes go through shared memory."""
        if shm_threshold is None or not shared_memory.shared_memory_available():
            shm_threshold = 1 << 62
        payload, descriptors = shared_memory.encode(item, shm_threshold)
        frame = pickle.dumps((channel, key, payload, descriptors), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self._connection(address).send_bytes(frame)
        except BaseException:
            shared_memory.discard(descriptors)
            raise
        self.counters["socket_messages"] += 1
        self.counters["socket_bytes"] += len(frame)
        for descriptor in descriptors:
            if descriptor[0] == "shm":
                self.counters["shared_memory_buffers"] += 1
                self.counters["shared_memory_bytes"] += descriptor[2]

    def _connection(self, address: str) -> Connection:
        connection = self._connections.get(address)
        if connection is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(address)
            connection = self._connections[address] = Connection(sock.detach())
        return connection

    def forget(self, address: str) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()
