"""Socket transports between processes: each process has one inbox; senders keep a connection per inbox.

* same node: a Unix stream socket in the session's private directory (mode 0700: only this user's processes
  can connect, so its frames are not authenticated); arrays of at least the channel's threshold go through
  ``/dev/shm`` (see ``shared_memory``) so the socket carries only their names;
* across nodes: TCP on the node's address, every byte on the wire. A connection starts with a handshake that
  proves both ends hold the session's secret, and every frame carries an HMAC-SHA256 under a per-connection key
  with a sequence number (see ``framing``); a frame that fails it is refused before it is unpickled and the
  connection is dropped. Frames are not encrypted.

An inbox never depends on its owner to read: a thread per connection receives its frames, decodes them and
queues the items (``keyed_queues``) the moment they arrive, whatever the owner is doing, so a sender's ``send``
returns as soon as the bytes are across (a frame of any size) and the queues grow in the receiver's memory, not
in a blocked sender. New connections are accepted by one thread and authenticated in their own (a TCP peer that
stays silent fails its handshake after ``HANDSHAKE_TIMEOUT_S`` without holding up anyone else). Every send has a
deadline: a receiver that takes no bytes (a stopped or hung process) makes it raise ``SendTimeout``.

When a connection closes, the inbox drops the shared-memory mappings that came through it (a sender that was
replaced or removed); arrays already received keep theirs.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass

from embodied_rl.runtime.transports.encoding import Decoder, Encoder, pack_message, unpack_message
from embodied_rl.runtime.transports.framing import (HANDSHAKE_TIMEOUT_S, FrameReader, FrameRefused, FrameWriter,
                                                   HandshakeError, SendTimeout, client_handshake, remaining,
                                                   server_handshake)
from embodied_rl.runtime.transports import point_to_point
from embodied_rl.runtime.transports.keyed_queues import KeyedQueues, Undeliverable
from embodied_rl.runtime.transports.shared_memory import segment_prefix, shared_memory_available

log = logging.getLogger("embodied_rl.channel")

MAX_PENDING_HANDSHAKES = 64  # TCP peers still proving themselves; more are refused at once


@dataclass(frozen=True)
class InboxAddress:
    node_id: str
    unix_path: str
    tcp_host: str
    tcp_port: int

    def describe(self, transport: str) -> str:
        where = self.unix_path if transport == "unix_socket" else f"{self.tcp_host}:{self.tcp_port}"
        return f"inbox {where} on node {self.node_id[:8]}"


class Inbox:
    """This process's receiving end: messages from every sender, sorted into ``(channel, key)`` queues."""

    def __init__(self, session_dir: str, node_id: str, host: str, authkey: bytes):
        self.authkey = authkey
        self.segment_prefix = segment_prefix(os.path.basename(session_dir))
        unix_path = os.path.join(session_dir, f"{uuid.uuid4().hex[:12]}.sock")
        self._unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._unix.bind(unix_path)
        self._unix.listen(256)
        self._tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._tcp.bind((host, 0))
        self._tcp.listen(256)
        self.address = InboxAddress(node_id, unix_path, host, self._tcp.getsockname()[1])
        self.queues = KeyedQueues()
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._handshakes = threading.BoundedSemaphore(MAX_PENDING_HANDSHAKES)
        self._wake_read, self._wake_write = os.pipe()
        self._closed = False
        threading.Thread(target=self._accept_loop, name="inbox-accept", daemon=True).start()

    # --- the owner's side --------------------------------------------------------------------------------
    def deliver(self, channel: str, key: str, item) -> None:
        """Enqueue directly (a sender in this same process: no copy, no socket)."""
        self.queues.append((channel, key), item)

    def take(self, channel: str, key: str, max_items: int, timeout: float | None) -> list:
        """Up to ``max_items`` items of ``key``, waiting up to ``timeout`` s for the first; [] if none came."""
        return self.queues.take((channel, key), max_items, timeout)

    def qsize(self, channel: str, key: str) -> int:
        return self.queues.size((channel, key))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        os.write(self._wake_write, b"x")
        with self._lock:
            connections = list(self._connections)
        for connection in connections:  # wakes its thread, which closes it
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._unix.close()
        self._tcp.close()
        try:
            os.unlink(self.address.unix_path)
        except FileNotFoundError:
            pass

    # --- the receiving threads ---------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self._unix, selectors.EVENT_READ)
                selector.register(self._tcp, selectors.EVENT_READ)
                selector.register(self._wake_read, selectors.EVENT_READ)
                while not self._closed:
                    for ready, _ in selector.select():
                        if ready.fileobj is self._wake_read or self._closed:
                            return
                        try:
                            client, _ = ready.fileobj.accept()
                        except OSError:
                            continue
                        self._start_connection(client, authenticated=ready.fileobj is self._tcp)
        finally:
            os.close(self._wake_read)
            os.close(self._wake_write)

    def _start_connection(self, client: socket.socket, authenticated: bool) -> None:
        if authenticated and not self._handshakes.acquire(blocking=False):
            log.warning("inbox %s: %d TCP peers are still in their handshake; refusing another",
                        self.address.describe("tcp"), MAX_PENDING_HANDSHAKES)
            client.close()
            return
        with self._lock:
            self._connections.add(client)
        threading.Thread(target=self._receive_loop, args=(client, authenticated), daemon=True,
                         name="inbox-tcp" if authenticated else "inbox-unix").start()

    def _receive_loop(self, client: socket.socket, authenticated: bool) -> None:
        """One connection's thread: handshake (TCP), then receive, check, decode and queue frames until EOF."""
        decoder = Decoder()
        pair = None  # this connection's point-to-point group, once its sender formed one
        try:
            frame_key = None
            if authenticated:
                try:
                    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    frame_key = server_handshake(client, self.authkey, HANDSHAKE_TIMEOUT_S)
                except (OSError, HandshakeError) as error:
                    log.warning("inbox %s: dropped a TCP peer that failed the handshake within %.0f s: %s",
                                self.address.describe("tcp"), HANDSHAKE_TIMEOUT_S, error)
                    return
                finally:
                    self._handshakes.release()
            reader = FrameReader(client, frame_key)
            while not self._closed:
                body = reader.receive()
                if body is None:
                    return
                channel, key, payload, descriptors = unpack_message(body)
                if channel == point_to_point.PAIR_FRAME:
                    pair = point_to_point.join_receiver(payload)
                    continue
                foreign = [d[1] for d in descriptors if d[0] not in ("inline", "p2p") and
                           (authenticated or not d[1].startswith(self.segment_prefix))]
                if foreign:  # across nodes every byte is inline; here, only this session's segments
                    raise FrameRefused(f"a frame names shared memory outside this session: {foreign[0]!r}")
                if any(d[0] == "p2p" for d in descriptors):
                    if pair is None:
                        raise FrameRefused("a frame names point-to-point buffers, but no pair was formed")
                    descriptors = point_to_point.receive_buffers(pair, descriptors)
                try:
                    item = decoder.decode(payload, descriptors)
                except Exception as error:  # the frame is whole: keep the connection, hand the error to the reader
                    item = Undeliverable(error)
                self.queues.append((channel, key), item)
        except FrameRefused as error:
            log.error("inbox %s: refused a frame and dropped its connection: %s",
                      self.address.describe("tcp" if authenticated else "unix_socket"), error)
        except OSError as error:
            if not self._closed:
                log.info("inbox %s: a connection ended: %s", self.address.unix_path, error)
        except Exception:
            log.exception("inbox %s: dropped a connection whose frame could not be read", self.address.unix_path)
        finally:
            if pair is not None:
                pair.destroy()
            decoder.close()  # the mappings of this sender's segments
            with self._lock:
                self._connections.discard(client)
            client.close()


class _Connection:
    def __init__(self, sock: socket.socket, frame_key: bytes | None):
        self.sock = sock
        self.writer = FrameWriter(sock, frame_key)

    def close(self) -> None:
        self.sock.close()


class Outbox:
    """This process's sending end: one cached connection per destination inbox, and traffic counters.

    Thread safe: one send at a time per process (a frame must not interleave with another on a connection).
    """

    def __init__(self, node_id: str, authkey: bytes, session_tag: str):
        self.node_id = node_id
        self.authkey = authkey
        self.counters = defaultdict(int)
        self.encoder = Encoder(segment_prefix(session_tag), self.counters)
        self._connections: dict[InboxAddress, _Connection] = {}
        self._pairs: dict[InboxAddress, object] = {}  # point-to-point groups, by receiver
        self._lock = threading.Lock()

    def transport_to(self, address: InboxAddress) -> str:
        return "unix_socket" if address.node_id == self.node_id else "tcp"

    def send(self, address: InboxAddress, channel: str, key: str, item, shm_threshold: int | None,
             deadline: float | None = None, p2p_threshold: int | None = None) -> None:
        """Send ``item`` by ``deadline`` (``time.monotonic()`` seconds; None: no limit); same-node array buffers of
        at least ``shm_threshold`` bytes go through shared memory; with ``p2p_threshold`` (and then no shared
        memory) buffers of at least that many bytes go on the receiver's point-to-point group instead.

        Raises ``SendTimeout`` (naming the inbox) when the receiver takes no bytes before the deadline; the
        connection is then closed (it holds part of a frame). Other ``OSError``: the receiver is gone.
        """
        transport = self.transport_to(address)
        try:
            if not self._lock.acquire(timeout=-1 if deadline is None else max(0.0, deadline - time.monotonic())):
                raise SendTimeout("waiting for another thread's send")
            try:
                if p2p_threshold is None:
                    self._send(address, transport, channel, key, item, shm_threshold, deadline)
                else:
                    self._send_p2p(address, transport, channel, key, item, p2p_threshold, deadline)
            finally:
                self._lock.release()
        except SendTimeout as error:
            raise SendTimeout(f"channel {channel!r}, key {key!r}: {address.describe(transport)}: {error}") from error

    def _send(self, address, transport, channel, key, item, shm_threshold, deadline) -> None:
        same_node = transport == "unix_socket"
        if not same_node or not shared_memory_available():
            shm_threshold = None
        connection = self._connection(address, transport, channel, deadline)
        wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
        payload, descriptors = self.encoder.encode(item, address, shm_threshold, same_node, wait_s)
        try:
            size = connection.writer.send(pack_message(channel, key, payload, descriptors), deadline)
        except BaseException:
            self.encoder.discard(address, descriptors)
            self._forget(address)  # part of a frame may be on the wire: this connection cannot carry another
            raise
        self.counters[f"{transport}_messages"] += 1
        self.counters[f"{transport}_bytes"] += size
        for descriptor in descriptors:
            if descriptor[0] != "inline":
                self.counters[f"shared_memory_{descriptor[0]}_buffers"] += 1
                self.counters["shared_memory_buffers"] += 1
                self.counters["shared_memory_bytes"] += descriptor[3]

    def _send_p2p(self, address, transport, channel, key, item, threshold: int, deadline) -> None:
        """The frame on the socket, its buffers of at least ``threshold`` bytes after it on the pair's group."""
        connection = self._connection(address, transport, channel, deadline)
        try:
            pair = self._pairs.get(address)
            if pair is None:
                spec, frame = point_to_point.open_pair(self.node_id[:8])
                connection.writer.send(pack_message(point_to_point.PAIR_FRAME, "", frame, []), deadline)
                pair = self._pairs[address] = point_to_point.join_sender(spec)
                log.info("channel %s: point-to-point pair with %s formed (gloo)", channel, address.describe(transport))
            payload, descriptors = self.encoder.encode(item, address, None, transport == "unix_socket")
            wire, bulk = [], []
            for descriptor in descriptors:
                if descriptor[1].nbytes >= threshold:
                    wire.append(("p2p", descriptor[1].nbytes))
                    bulk.append(descriptor[1])
                else:
                    wire.append(descriptor)
            size = connection.writer.send(pack_message(channel, key, payload, wire), deadline)
            sent = point_to_point.send_buffers(pair, bulk)
        except BaseException:
            self._forget(address)  # a frame or its buffers may be half across: this pair cannot carry another
            raise
        self.counters[f"{transport}_messages"] += 1
        self.counters[f"{transport}_bytes"] += size
        self.counters["point_to_point_buffers"] += len(bulk)
        self.counters["point_to_point_bytes"] += sent

    def _connection(self, address: InboxAddress, transport: str, channel: str, deadline: float | None):
        connection = self._connections.get(address)
        if connection is not None:
            return connection
        try:
            if transport == "unix_socket":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.settimeout(remaining(deadline, "connecting"))
                    sock.connect(address.unix_path)
                except BaseException:
                    sock.close()
                    raise
                frame_key = None
            else:
                sock = socket.create_connection((address.tcp_host, address.tcp_port),
                                                timeout=remaining(deadline, "connecting"))
                try:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    frame_key = client_handshake(sock, self.authkey, deadline)
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError as error:
            raise SendTimeout(f"connecting: {error}") from error
        sock.settimeout(None)
        log.info("channel %s: %s -> %s over %s", channel, self.node_id[:8], address.node_id[:8], transport)
        connection = self._connections[address] = _Connection(sock, frame_key)
        return connection

    def forget(self, address: InboxAddress) -> None:
        """Close the connection to ``address`` and drop its segment pool (the receiver is gone or replaced)."""
        with self._lock:
            self._forget(address)

    def _forget(self, address: InboxAddress) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()
        pair = self._pairs.pop(address, None)
        if pair is not None:
            pair.destroy()
        self.encoder.forget(address)
