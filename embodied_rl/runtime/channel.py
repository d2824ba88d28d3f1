"""Channel: named, keyed queues between worker processes.

A channel handle is a small picklable object; pass it to workers. ``put(item, key)`` sends to one reader of
``key`` (when several workers read the same key, the least busy one on this node: see ``reader_load``);
``get(key)`` blocks until an item for ``key`` arrives in this process. Readers announce themselves with
``subscribe(key)`` (``get`` does it on first use); a sender waits for the first reader of a key to appear.
"""

from __future__ import annotations

import itertools
import time

import ray

from embodied_rl.runtime.reader_load import ReaderLoad, ReaderLoads, least_loaded
from embodied_rl.runtime.transports.shared_memory import DEFAULT_THRESHOLD
from embodied_rl.runtime.transports.sockets import Inbox, Outbox

TRANSPORTS = ("auto", "socket", "shared_memory")


_CHANNEL_NUMBERS = itertools.count()


class ChannelTimeout(TimeoutError):
    pass


class _ProcessEndpoints:
    """The one inbox and outbox of this process, per cluster session."""

    _by_session: dict[str, "_ProcessEndpoints"] = {}

    def __init__(self, session_dir: str, authkey: bytes):
        import os

        os.makedirs(session_dir, mode=0o700, exist_ok=True)  # absent on other nodes of a multi-node cluster
        node_id = ray.get_runtime_context().get_node_id()
        self.inbox = Inbox(session_dir, node_id, ray.util.get_node_ip_address(), authkey)
        self.outbox = Outbox(node_id, authkey, os.path.basename(session_dir))
        self.node_id = node_id
        self.own_loads: dict[tuple[str, str], ReaderLoad] = {}  # cells of the keys this process reads
        self.reader_loads = ReaderLoads()

    @classmethod
    def of(cls, session_dir: str, authkey: bytes) -> "_ProcessEndpoints":
        endpoints = cls._by_session.get(session_dir)
        if endpoints is None:
            endpoints = cls._by_session[session_dir] = cls(session_dir, authkey)
        return endpoints


class Channel:
    """A named set of keyed queues. Create one in the driver with ``Channel.create(name, cluster)``."""

    def __init__(self, name: str, session_dir: str, directory, transport: str = "auto", authkey: bytes = b""):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport={transport!r}; allowed: {', '.join(TRANSPORTS)}")
        self.transport = transport
        # auto: arrays of 64 KiB and more through shared memory, smaller ones inline on the socket.
        self.shm_threshold = {"auto": DEFAULT_THRESHOLD, "shared_memory": 0, "socket": None}[transport]
        self.name = name
        self.session_dir = session_dir
        self.authkey = authkey
        self.directory = directory
        self._readers: dict[str, list[tuple]] = {}  # key -> [(inbox address, load cell path)]
        self._round_robin: dict[str, itertools.count] = {}
        self._subscribed: set[str] = set()

    @classmethod
    def create(cls, name: str, cluster, transport: str = "auto") -> "Channel":
        """A new channel of this cluster session; ``name`` labels it (each call makes a distinct channel).

        ``transport``: ``auto`` (large arrays through shared memory), ``socket`` (everything through the
        socket), ``shared_memory`` (every array buffer through shared memory).
        """
        unique = f"{cluster.session_id}/{name}/{next(_CHANNEL_NUMBERS)}"
        return cls(unique, cluster.session_dir, cluster.channel_directory(), transport, cluster.authkey)

    def __getstate__(self):
        return {"name": self.name, "session_dir": self.session_dir, "directory": self.directory,
                "transport": self.transport, "authkey": self.authkey}

    def __setstate__(self, state):
        self.__init__(state["name"], state["session_dir"], state["directory"], state["transport"], state["authkey"])

    def traffic(self) -> dict:
        """Counters of what this process has sent, by transport (all channels of the session)."""
        return dict(self._endpoints.outbox.counters)

    def shared_array(self, shape, dtype="float32"):
        """A numpy array in shared memory: putting it (or a view of it) sends its name, not its bytes.

        Readers on this node see the same memory (torch's ``share_memory_()`` semantics): do not write to it
        again until the readers are done with what was sent. Readers on other nodes get a copy.
        """
        return self._endpoints.outbox.encoder.shared_arrays.empty(shape, dtype)

    def transport_to_readers(self, key: str = "default", timeout: float = 120.0) -> dict:
        """``{reader node id: transport}`` this process would use to send on ``key``."""
        outbox = self._endpoints.outbox
        return {address.node_id: outbox.transport_to(address) for address, _ in self._lookup_readers(key, timeout)}

    @property
    def _endpoints(self) -> _ProcessEndpoints:
        return _ProcessEndpoints.of(self.session_dir, self.authkey)

    # --- reading -------------------------------------------------------------------------------------------
    def subscribe(self, key: str = "default") -> None:
        """Make this process a reader of ``key``."""
        if key not in self._subscribed:
            endpoints = self._endpoints
            load = endpoints.own_loads.get((self.name, key))
            if load is None:
                load = endpoints.own_loads[(self.name, key)] = ReaderLoad(endpoints.outbox.encoder.segment_prefix)
            ray.get(self.directory.subscribe.remote(self.name, key, endpoints.inbox.address, load.path))
            self._subscribed.add(key)

    def unsubscribe(self, key: str = "default") -> None:
        if key in self._subscribed:
            endpoints = self._endpoints
            ray.get(self.directory.unsubscribe.remote(self.name, key, endpoints.inbox.address))
            load = endpoints.own_loads.pop((self.name, key), None)
            if load is not None:
                load.close()
            self._subscribed.discard(key)

    def get(self, key: str = "default", timeout: float | None = None):
        """The next item for ``key``; raises ``ChannelTimeout`` after ``timeout`` seconds."""
        return self.get_batch(key, 1, timeout)[0]

    def get_batch(self, key: str = "default", max_items: int = 1 << 30, timeout: float | None = None) -> list:
        """Wait for at least one item for ``key``, then take every item already here, up to ``max_items``."""
        self.subscribe(key)
        endpoints = self._endpoints
        inbox, load = endpoints.inbox, endpoints.own_loads[(self.name, key)]
        queue = inbox.queues[(self.name, key)]
        load.update(len(queue), busy=False)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not queue:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not inbox.pump(remaining) and deadline is not None and time.monotonic() >= deadline:
                raise ChannelTimeout(f"no item for key {key!r} on channel {self.name!r} within {timeout} s")
        while inbox.pump(0):  # drain what else has already arrived
            pass
        items = [queue.popleft() for _ in range(min(max_items, len(queue)))]
        load.update(len(queue), busy=True)
        return items

    def qsize(self, key: str = "default") -> int:
        """Items for ``key`` already received by this process."""
        return len(self._endpoints.inbox.queues[(self.name, key)])

    # --- writing -------------------------------------------------------------------------------------------
    def put(self, item, key: str = "default", timeout: float = 120.0) -> None:
        """Send ``item`` to one reader of ``key`` (waits up to ``timeout`` s for a reader to subscribe)."""
        readers = self._readers.get(key) or self._lookup_readers(key, timeout)
        endpoints = self._endpoints
        address = self._choose(key, readers, endpoints)
        while True:
            try:
                self._send(endpoints, address, key, item)
                return
            except OSError:
                # That reader is gone (killed, crashed or left): drop it for everyone and try the others.
                endpoints.outbox.forget(address)
                ray.get(self.directory.unsubscribe.remote(self.name, key, address))
                self._readers.pop(key, None)
                readers = self._lookup_readers(key, timeout)
                address = self._choose(key, readers, endpoints)

    def put_to_every_reader(self, item, key: str = "default", timeout: float = 120.0) -> int:
        """Send ``item`` to each current reader of ``key`` (e.g. a stop signal); returns how many got it."""
        endpoints = self._endpoints
        readers = self._lookup_readers(key, timeout)
        sent = 0
        for address, _ in readers:
            try:
                self._send(endpoints, address, key, item)
                sent += 1
            except OSError:  # that reader is gone: drop it for everyone
                endpoints.outbox.forget(address)
                ray.get(self.directory.unsubscribe.remote(self.name, key, address))
                self._readers.pop(key, None)
        return sent

    def _send(self, endpoints: _ProcessEndpoints, address, key: str, item) -> None:
        if address == endpoints.inbox.address:
            endpoints.inbox.deliver(self.name, key, item)  # a reader in this process: no copy, no socket
        else:
            endpoints.outbox.send(address, self.name, key, item, self.shm_threshold)

    def _choose(self, key: str, readers: list[tuple], endpoints: _ProcessEndpoints):
        if len(readers) == 1:
            return readers[0][0]
        return least_loaded(readers, next(self._round_robin[key]), endpoints.reader_loads, endpoints.node_id)[0]

    def refresh(self) -> None:
        """Forget cached reader lists (call between batches when workers may have joined or left)."""
        self._readers.clear()

    def _lookup_readers(self, key: str, timeout: float) -> list[tuple]:
        deadline = time.monotonic() + timeout
        while True:
            readers = ray.get(self.directory.consumers.remote(self.name, key))
            if readers:
                self._readers[key] = readers
                self._round_robin.setdefault(key, itertools.count())
                return readers
            if time.monotonic() > deadline:
                raise ChannelTimeout(f"no reader subscribed to key {key!r} on channel {self.name!r}")
            time.sleep(0.005)
