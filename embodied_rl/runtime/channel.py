"""Channel: named, keyed queues between worker processes.

A channel handle is a small picklable object; pass it to workers. ``put(item, key)`` sends to one reader of
``key`` (when several workers read the same key, the least busy one on this node: see ``reader_load``);
``get(key)`` blocks until an item for ``key`` arrives in this process. Readers announce themselves with
``subscribe(key)`` (``get`` does it on first use); a sender waits for the first reader of a key to appear.

A ``put`` never waits for the reader's owner to call ``get``: each process receives in the background (see
``transports.sockets``), so a put returns once its bytes are across, and its ``timeout`` bounds the whole of it
(finding a reader, connecting, sending): a reader process that takes no bytes (stopped, hung) makes it raise
``ChannelTimeout`` naming the channel, key and reader.

Routes, chosen per (sender, reader) pair and per array: a reader in the sender's process gets the object itself;
one on the same node gets the frame on a Unix socket and (``auto``) arrays of 64 KiB and more through shared
memory, CUDA tensors as CUDA IPC handles; one on another node gets the frame on TCP and (``auto``) arrays of 1 MiB
and more as gloo point-to-point sends on a group of two formed for the pair (``transports.point_to_point``; its
sends are bounded by ``PAIR_TIMEOUT_S``, not the put's timeout). ``transport_to_readers`` names the route and
``traffic`` counts each.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

import ray

from embodied_rl.runtime.reader_load import ReaderLoad, ReaderLoads, least_loaded
from embodied_rl.runtime.transports.framing import SendTimeout
from embodied_rl.runtime.transports.session_files import register_process, sweep_dead_sessions
from embodied_rl.runtime.transports.shared_memory import DEFAULT_THRESHOLD
from embodied_rl.runtime.transports.sockets import Inbox, Outbox

TRANSPORTS = ("auto", "socket", "shared_memory", "collective")


_CHANNEL_NUMBERS = itertools.count()


CROSS_NODE_P2P_THRESHOLD = 1 << 20
"""``auto`` across nodes: arrays of at least this many bytes go on a gloo pair, not the TCP frame (measured with
``embodied-rl bench channel --nodes 2``: 1.6x TCP at 1 MB, 3.6x at 10 MB, 2.6x at 100 MB; docs/results.md)."""

DIRECTORY_TIMEOUT_S = 60.0
"""How long a call on the channel directory (subscribe, unsubscribe, the readers of a key) may take."""


class ChannelTimeout(TimeoutError):
    pass


class _ProcessEndpoints:
    """The one inbox and outbox of this process, per cluster session.

    Creating them records this process in the session's directory on its node and sweeps the files of dead
    sessions there (so every node a run uses is swept, not only the driver's).
    """

    _by_session: dict[str, "_ProcessEndpoints"] = {}
    _creating = threading.Lock()

    def __init__(self, session_dir: str, authkey: bytes):
        os.makedirs(session_dir, mode=0o700, exist_ok=True)  # absent on other nodes of a multi-node cluster
        register_process(session_dir)
        sweep_dead_sessions(keep=session_dir)
        node_id = ray.get_runtime_context().get_node_id()
        self.pid = os.getpid()
        self.inbox = Inbox(session_dir, node_id, ray.util.get_node_ip_address(), authkey)
        self.outbox = Outbox(node_id, authkey, os.path.basename(session_dir))
        self.node_id = node_id
        self.own_loads: dict[tuple[str, str], ReaderLoad] = {}  # cells of the keys this process reads
        self.reader_loads = ReaderLoads()

    @classmethod
    def of(cls, session_dir: str, authkey: bytes) -> "_ProcessEndpoints":
        endpoints = cls._by_session.get(session_dir)
        if endpoints is None or endpoints.pid != os.getpid():  # a forked child has none of the parent's threads
            with cls._creating:
                endpoints = cls._by_session.get(session_dir)
                if endpoints is None or endpoints.pid != os.getpid():
                    endpoints = cls._by_session[session_dir] = cls(session_dir, authkey)
        return endpoints


class Channel:
    """A named set of keyed queues. Create one in the driver with ``Channel.create(name, cluster)``."""

    def __init__(self, name: str, session_dir: str, directory, transport: str = "auto", authkey: bytes = b""):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport={transport!r}; allowed: {', '.join(TRANSPORTS)}")
        self.transport = transport
        # auto: arrays of 64 KiB and more through shared memory within a node, of 1 MiB and more as point-to-point
        # sends on a gloo pair across nodes (transports/point_to_point.py), the rest inline on the socket;
        # collective: 64 KiB and more on the pair whatever the node.
        self.shm_threshold = {"auto": DEFAULT_THRESHOLD, "shared_memory": 0}.get(transport)
        self.p2p_threshold = DEFAULT_THRESHOLD if transport == "collective" else None
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

        ``transport``: ``auto`` (large arrays through shared memory within a node, on a gloo pair across nodes),
        ``socket`` (everything through the
        socket), ``shared_memory`` (every array buffer through shared memory), ``collective`` (large arrays as
        gloo point-to-point sends on a group of two formed per sender and reader; the frame on the socket).
        """
        unique = f"{cluster.session_id}/{name}/{next(_CHANNEL_NUMBERS)}"
        return cls(unique, cluster.session_dir, cluster.channel_directory(), transport, cluster.authkey)

    def __getstate__(self):
        return {"name": self.name, "session_dir": self.session_dir, "directory": self.directory,
                "transport": self.transport, "authkey": self.authkey}

    def __setstate__(self, state):
        self.__init__(state["name"], state["session_dir"], state["directory"], state["transport"], state["authkey"])

    def traffic(self) -> dict:
        """Counters of what this process has sent, by transport (all channels of the session):
        ``<transport>_messages``/``_bytes``, ``shared_memory_buffers``/``_bytes`` (by kind too),
        ``shared_memory_fallbacks`` (buffers that went inline because shared memory had no room), and
        ``point_to_point_buffers``/``_bytes`` (buffers sent on a pair's group)."""
        return dict(self._endpoints.outbox.counters)

    def shared_array(self, shape, dtype="float32"):
        """A numpy array in shared memory: putting it (or a view of it) sends its name, not its bytes.

        Readers on this node see the same memory (torch's ``share_memory_()`` semantics): do not write to it
        again until the readers are done with what was sent. Readers on other nodes get a copy. Raises
        ``OSError`` (ENOSPC, naming the directory and its free bytes) when shared memory cannot hold it.
        """
        return self._endpoints.outbox.encoder.shared_arrays.empty(shape, dtype)

    def transport_to_readers(self, key: str = "default", timeout: float = 120.0) -> dict:
        """``{reader node id: route}`` this process would use to send on ``key``: ``unix_socket`` (with shared
        memory for large arrays under ``auto``), ``tcp``, ``tcp+gloo_point_to_point`` (``auto`` across nodes: arrays
        of 1 MiB and more on a gloo pair) or ``gloo_point_to_point`` (``collective``)."""
        endpoints = self._endpoints
        return {address.node_id: self._route(endpoints, address) for address, _ in self._lookup_readers(key, timeout)}

    def _p2p_threshold(self, endpoints: _ProcessEndpoints, address) -> int | None:
        """Bytes from which an array goes on the pair's group when sent to ``address`` (None: never)."""
        if self.transport == "auto" and address.node_id != endpoints.node_id:
            return CROSS_NODE_P2P_THRESHOLD
        return self.p2p_threshold

    def _route(self, endpoints: _ProcessEndpoints, address) -> str:
        if self.transport == "collective":
            return "gloo_point_to_point"
        transport = endpoints.outbox.transport_to(address)
        return f"{transport}+gloo_point_to_point" if self._p2p_threshold(endpoints, address) else transport

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
                endpoints.inbox.queues.watch((self.name, key), load)
            self._ask_directory("subscribe", key, endpoints.inbox.address, load.path)
            self._subscribed.add(key)

    def unsubscribe(self, key: str = "default") -> None:
        if key in self._subscribed:
            endpoints = self._endpoints
            self._ask_directory("unsubscribe", key, endpoints.inbox.address)
            load = endpoints.own_loads.pop((self.name, key), None)
            if load is not None:
                endpoints.inbox.queues.watch((self.name, key), None)
                load.close()
            self._subscribed.discard(key)

    def get(self, key: str = "default", timeout: float | None = None):
        """The next item for ``key``; raises ``ChannelTimeout`` after ``timeout`` seconds."""
        return self.get_batch(key, 1, timeout)[0]

    def get_batch(self, key: str = "default", max_items: int = 1 << 30, timeout: float | None = None) -> list:
        """Wait for at least one item for ``key``, then take every item already here, up to ``max_items``."""
        self.subscribe(key)
        items = self._endpoints.inbox.take(self.name, key, max_items, timeout)
        if not items:
            raise ChannelTimeout(f"no item for key {key!r} on channel {self.name!r} within {timeout} s")
        return items

    def qsize(self, key: str = "default") -> int:
        """Items for ``key`` already received by this process."""
        return self._endpoints.inbox.qsize(self.name, key)

    # --- writing -------------------------------------------------------------------------------------------
    def put(self, item, key: str = "default", timeout: float = 120.0) -> None:
        """Send ``item`` to one reader of ``key`` within ``timeout`` s: waiting for a reader to subscribe, then
        for it to take the bytes (not for it to call ``get``). Raises ``ChannelTimeout`` when time runs out."""
        deadline = time.monotonic() + timeout
        readers = self._readers.get(key) or self._lookup_readers(key, timeout, deadline)
        endpoints = self._endpoints
        address = self._choose(key, readers, endpoints)
        while True:
            try:
                self._send(endpoints, address, key, item, deadline, timeout)
                return
            except ChannelTimeout:
                raise
            except OSError:
                # That reader is gone (killed, crashed or left): drop it for everyone and try the others.
                self._drop_reader(endpoints, key, address)
                readers = self._lookup_readers(key, timeout, deadline)
                address = self._choose(key, readers, endpoints)

    def put_to_every_reader(self, item, key: str = "default", timeout: float = 120.0) -> int:
        """Send ``item`` to each current reader of ``key`` (e.g. a stop signal); returns how many got it.

        Waits up to ``timeout`` s for a first reader, then gives each reader ``timeout`` s to take the bytes;
        a reader that does not is skipped and, once the others have theirs, reported by ``ChannelTimeout``.
        """
        endpoints = self._endpoints
        readers = self._lookup_readers(key, timeout)
        sent, timeouts = 0, []
        for address, _ in readers:
            try:
                self._send(endpoints, address, key, item, time.monotonic() + timeout, timeout)
                sent += 1
            except ChannelTimeout as error:
                timeouts.append(error)
            except OSError:  # that reader is gone: drop it for everyone
                self._drop_reader(endpoints, key, address)
        if timeouts:
            raise ChannelTimeout(f"{len(timeouts)} of {len(readers)} readers did not take the item "
                                 f"({sent} did): {timeouts[0]}") from timeouts[0]
        return sent

    def _ask_directory(self, method: str, key: str, *args):
        """``method`` of the channel directory (the actor recording who reads which key), within
        ``DIRECTORY_TIMEOUT_S``; ``ChannelTimeout`` names the call after that."""
        try:
            return ray.get(getattr(self.directory, method).remote(self.name, key, *args), timeout=DIRECTORY_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise ChannelTimeout(f"the channel directory did not answer {method} for key {key!r} on channel "
                                 f"{self.name!r} within {DIRECTORY_TIMEOUT_S:g} s") from None

    def _drop_reader(self, endpoints: _ProcessEndpoints, key: str, address) -> None:
        endpoints.outbox.forget(address)
        self._ask_directory("unsubscribe", key, address)
        self._readers.pop(key, None)

    def _send(self, endpoints: _ProcessEndpoints, address, key: str, item, deadline: float, timeout: float) -> None:
        if address == endpoints.inbox.address:
            endpoints.inbox.deliver(self.name, key, item)  # a reader in this process: no copy, no socket
            return
        try:
            endpoints.outbox.send(address, self.name, key, item, self.shm_threshold, deadline,
                                  self._p2p_threshold(endpoints, address))
        except SendTimeout as error:
            raise ChannelTimeout(f"put on channel {self.name!r}, key {key!r} did not finish within {timeout} s: "
                                 f"{error}") from error

    def _choose(self, key: str, readers: list[tuple], endpoints: _ProcessEndpoints):
        if len(readers) == 1:
            return readers[0][0]
        return least_loaded(readers, next(self._round_robin[key]), endpoints.reader_loads, endpoints.node_id)[0]

    def refresh(self) -> None:
        """Forget cached reader lists (call between batches when workers may have joined or left)."""
        self._readers.clear()

    def _lookup_readers(self, key: str, timeout: float, deadline: float | None = None) -> list[tuple]:
        deadline = time.monotonic() + timeout if deadline is None else deadline
        while True:
            readers = self._ask_directory("consumers", key)
            if readers:
                self._readers[key] = readers
                self._round_robin.setdefault(key, itertools.count())
                return readers
            if time.monotonic() > deadline:
                raise ChannelTimeout(f"no reader subscribed to key {key!r} on channel {self.name!r}")
            time.sleep(0.005)
