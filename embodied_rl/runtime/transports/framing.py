"""Frames on a stream socket: length-prefixed, sent under a deadline, and (across nodes) authenticated.

A frame is ``[body length: 8 bytes big endian][body]``, followed on an authenticated connection by a 32-byte
``HMAC-SHA256(frame key, sequence number || length || body)``. The receiver counts frames itself, so a frame
that was altered, replayed, reordered or dropped fails its check; it is refused before anything reads its body
(the body is a pickle: see ``sockets``), and the connection is dropped.

The frame key is per connection. The handshake (``client_handshake``/``server_handshake``) proves both ends
know the session's secret, as ``multiprocessing.connection``'s challenge does, and derives the key from it and
both ends' fresh nonces:

    server -> client   MAGIC || server nonce (32 B)
    client -> server   client nonce (32 B) || HMAC(secret, "client" || server nonce || client nonce)
    server -> client   HMAC(secret, "server" || server nonce || client nonce)
    frame key        = HMAC(secret, "frames" || server nonce || client nonce)

Unauthenticated connections (``frame_key=None``: Unix sockets in the session's 0700 directory) carry the same
frames without the MAC.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import time

MAGIC = b"ERL-CHANNEL-1\n"
NONCE_BYTES = 32
MAC_BYTES = 32
HANDSHAKE_TIMEOUT_S = 5.0  # how long an inbox gives a new TCP peer to prove it holds the session's secret
MAX_FRAME_BYTES = 1 << 36  # 64 GiB: a larger length is corruption (or an attack), not a message
_HEADER = struct.Struct("!Q")
_SEQUENCE = struct.Struct("!Q")
_IOV_CHUNK = 512  # buffers per sendmsg call (Linux allows 1024)


class SendTimeout(TimeoutError):
    """A frame (or the connection it needs) did not go out before the sender's deadline."""


class FrameRefused(ConnectionError):
    """A frame failed its length or authentication check; the connection must be dropped unread."""


class HandshakeError(ConnectionError):
    """The peer did not prove it holds the session's secret (or spoke another protocol)."""


def remaining(deadline: float | None, waiting_for: str) -> float | None:
    """Seconds left before ``deadline`` (None: no deadline); raises ``SendTimeout`` naming ``waiting_for``."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise SendTimeout(f"deadline passed while {waiting_for}")
    return left


def _mac(key: bytes, label: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, label + b"".join(parts), hashlib.sha256).digest()


def _receive_exact(sock: socket.socket, nbytes: int) -> bytes | None:
    """Exactly ``nbytes`` (honouring the socket's timeout); None on end of stream before the first byte."""
    buffer = bytearray(nbytes)
    view = memoryview(buffer)
    got = 0
    while got < nbytes:
        count = sock.recv_into(view[got:], nbytes - got)
        if count == 0:
            if got == 0:
                return None
            raise ConnectionError(f"stream closed after {got} of {nbytes} bytes")
        got += count
    return bytes(buffer)


def client_handshake(sock: socket.socket, secret: bytes, deadline: float | None) -> bytes:
    """The sender's half of the handshake; returns the frame key. Waits no later than ``deadline``."""
    try:
        sock.settimeout(remaining(deadline, "waiting for the inbox's handshake"))
        hello = _receive_exact(sock, len(MAGIC) + NONCE_BYTES)
        if hello is None or not hello.startswith(MAGIC):
            raise HandshakeError("the inbox did not open with the channel handshake")
        server_nonce, client_nonce = hello[len(MAGIC):], os.urandom(NONCE_BYTES)
        sock.settimeout(remaining(deadline, "sending the handshake"))
        sock.sendall(client_nonce + _mac(secret, b"client", server_nonce, client_nonce))
        sock.settimeout(remaining(deadline, "waiting for the inbox's proof"))
        proof = _receive_exact(sock, MAC_BYTES)
    except TimeoutError as error:
        raise SendTimeout(f"handshake: {error}") from error
    if proof is None:
        raise HandshakeError("the inbox closed the connection: it does not hold this session's secret")
    if not hmac.compare_digest(proof, _mac(secret, b"server", server_nonce, client_nonce)):
        raise HandshakeError("the inbox's proof is wrong: it does not hold this session's secret")
    sock.settimeout(None)
    return _mac(secret, b"frames", server_nonce, client_nonce)


def server_handshake(sock: socket.socket, secret: bytes, timeout: float = HANDSHAKE_TIMEOUT_S) -> bytes:
    """The inbox's half of the handshake; returns the frame key. A peer silent for ``timeout`` s fails it."""
    sock.settimeout(timeout)
    server_nonce = os.urandom(NONCE_BYTES)
    sock.sendall(MAGIC + server_nonce)
    answer = _receive_exact(sock, NONCE_BYTES + MAC_BYTES)
    if answer is None:
        raise HandshakeError("the peer closed the connection during the handshake")
    client_nonce, proof = answer[:NONCE_BYTES], answer[NONCE_BYTES:]
    if not hmac.compare_digest(proof, _mac(secret, b"client", server_nonce, client_nonce)):
        raise HandshakeError("the peer's proof is wrong: it does not hold this session's secret")
    sock.sendall(_mac(secret, b"server", server_nonce, client_nonce))
    sock.settimeout(None)
    return _mac(secret, b"frames", server_nonce, client_nonce)


class FrameWriter:
    """Sends frames on one connection (one thread at a time: the caller serialises)."""

    def __init__(self, sock: socket.socket, frame_key: bytes | None):
        self.sock = sock
        self.frame_key = frame_key
        self._sequence = 0

    def send(self, parts: list, deadline: float | None) -> int:
        """Send one frame whose body is ``parts`` (bytes-like, concatenated) by ``deadline``; returns its size.

        Raises ``SendTimeout`` if the receiver does not take it in time; the stream then holds part of a frame,
        so the caller must close this connection.
        """
        views = [memoryview(part).cast("B") for part in parts]
        header = _HEADER.pack(sum(view.nbytes for view in views))
        views.insert(0, memoryview(header))
        if self.frame_key is not None:
            mac = hmac.new(self.frame_key, _SEQUENCE.pack(self._sequence) + header, hashlib.sha256)
            for view in views[1:]:
                mac.update(view)
            views.append(memoryview(mac.digest()))
            self._sequence += 1
        views = [view for view in views if view.nbytes]
        total = sum(view.nbytes for view in views)
        first = 0
        while first < len(views):
            self.sock.settimeout(remaining(deadline, "the receiver took no more bytes"))
            try:
                sent = self.sock.sendmsg(views[first:first + _IOV_CHUNK])
            except TimeoutError as error:
                raise SendTimeout("the receiver took no more bytes before the deadline") from error
            while sent:
                size = views[first].nbytes
                if sent >= size:
                    sent -= size
                    first += 1
                else:
                    views[first] = views[first][sent:]
                    sent = 0
        return total


class FrameReader:
    """Receives the frames of one connection (from one thread)."""

    def __init__(self, sock: socket.socket, frame_key: bytes | None):
        self.sock = sock
        self.frame_key = frame_key
        self._sequence = 0

    def receive(self) -> bytearray | None:
        """The next frame's body, checked; None when the peer closed the connection between frames.

        Raises ``FrameRefused`` for an impossible length or a MAC that does not match (nothing of the body has
        been interpreted then), ``ConnectionError`` for a stream cut inside a frame.
        """
        header = _receive_exact(self.sock, _HEADER.size)
        if header is None:
            return None
        (length,) = _HEADER.unpack(header)
        if length > MAX_FRAME_BYTES:
            raise FrameRefused(f"frame length {length} exceeds {MAX_FRAME_BYTES}")
        body = bytearray(length)
        view = memoryview(body)
        got = 0
        while got < length:
            count = self.sock.recv_into(view[got:], length - got)
            if count == 0:
                raise ConnectionError(f"stream closed after {got} of a {length}-byte frame")
            got += count
        if self.frame_key is not None:
            mac = _receive_exact(self.sock, MAC_BYTES)
            expected = hmac.new(self.frame_key, _SEQUENCE.pack(self._sequence) + header, hashlib.sha256)
            expected.update(view)
            if mac is None or not hmac.compare_digest(mac, expected.digest()):
                raise FrameRefused(f"frame {self._sequence} ({length} bytes) failed its authentication check "
                                   "(altered, replayed or reordered)")
            self._sequence += 1
        return body
