"""Across nodes (TCP) only holders of the session's secret get in, and a frame altered, replayed or reordered on
the wire is refused before it is unpickled, its connection dropped.

A real inbox (its threads, its TCP port) and real outboxes in this process; the attacker's bytes are those the
real frame writer produces, captured on a socket pair and then altered.
"""

import logging
import os
import pickle
import socket
import time

import numpy as np
import pytest

from embodied_rl.runtime.transports.encoding import pack_message
from embodied_rl.runtime.transports.framing import FrameWriter, HandshakeError
from embodied_rl.runtime.transports.sockets import Inbox, Outbox

SECRET = os.urandom(32)


class _Touch:
    """Unpickling this creates ``path``: the proof that a frame's body was unpickled."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


@pytest.fixture
def inbox_and_sender(tmp_path):
    session_dir = tmp_path / "erl-auth-test"
    session_dir.mkdir(mode=0o700)
    inbox = Inbox(str(session_dir), "node-a", "127.0.0.1", SECRET)
    sender = Outbox("node-b", SECRET, session_dir.name)  # another node: TCP, authenticated
    try:
        sender.send(inbox.address, "c", "k", "hello", None, time.monotonic() + 10)
        assert inbox.take("c", "k", 10, 5.0) == ["hello"]
        yield inbox, sender
    finally:
        sender.forget(inbox.address)
        inbox.close()


def _frame_bytes(writer: FrameWriter, body_parts: list) -> bytes:
    """The exact bytes ``writer`` would put on the wire for ``body_parts`` next (its key and sequence number)."""
    capture_send, capture_receive = socket.socketpair()
    try:
        copy = FrameWriter(capture_send, writer.frame_key)
        copy._sequence = writer._sequence
        size = copy.send(body_parts, time.monotonic() + 10)
        data = b""
        while len(data) < size:
            data += capture_receive.recv(size - len(data))
        return data
    finally:
        capture_send.close()
        capture_receive.close()


def _closed_by_peer(sock: socket.socket, within_s: float) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _message(payload_object) -> list:
    return pack_message("c", "k", pickle.dumps(payload_object, protocol=5), [])


def test_a_frame_altered_on_the_wire_is_never_unpickled_and_its_connection_is_dropped(inbox_and_sender, tmp_path,
                                                                                        caplog):
    inbox, sender = inbox_and_sender
    connection = sender._connections[inbox.address]
    flag = tmp_path / "unpickled"
    genuine = _frame_bytes(connection.writer, _message("a harmless string of some length"))
    forged_body = b"".join(bytes(part) for part in _message(_Touch(str(flag))))
    # The attacker swaps in a body of its own (with a matching length) and keeps the genuine frame's MAC.
    forged = len(forged_body).to_bytes(8, "big") + forged_body + genuine[-32:]
    with caplog.at_level(logging.ERROR, logger="embodied_rl.channel"):
        connection.sock.sendall(forged)
        closed = _closed_by_peer(connection.sock, 10.0)
    assert not flag.exists(), "the forged frame was unpickled"
    assert closed, "the inbox kept the connection of a forged frame"
    assert inbox.qsize("c", "k") == 0
    assert any("failed its authentication check" in record.getMessage() for record in caplog.records)
    # The inbox itself goes on: a new connection authenticates and delivers.
    sender.forget(inbox.address)
    sender.send(inbox.address, "c", "k", np.arange(4), None, time.monotonic() + 10)
    np.testing.assert_array_equal(inbox.take("c", "k", 10, 5.0)[0], np.arange(4))


def test_a_replayed_frame_is_refused(inbox_and_sender):
    inbox, sender = inbox_and_sender
    connection = sender._connections[inbox.address]
    genuine = _frame_bytes(connection.writer, _message("once"))
    connection.sock.sendall(genuine)
    assert inbox.take("c", "k", 10, 5.0) == ["once"]
    connection.sock.sendall(genuine)  # the same bytes again: a valid MAC, for the previous sequence number
    assert _closed_by_peer(connection.sock, 10.0)
    assert inbox.qsize("c", "k") == 0


def test_a_peer_without_the_session_secret_is_refused_at_the_handshake(inbox_and_sender, tmp_path):
    inbox, _ = inbox_and_sender
    stranger = Outbox("node-c", os.urandom(32), "erl-auth-test")
    with pytest.raises(HandshakeError):
        stranger.send(inbox.address, "c", "k", "let me in", None, time.monotonic() + 10)
    assert inbox.qsize("c", "k") == 0
