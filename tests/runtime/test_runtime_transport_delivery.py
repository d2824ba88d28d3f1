"""A put never waits for the reader's owner to read, whatever the size, and never waits past its deadline.

Real Ray actor processes read; the driver sends through its real channel endpoints. TCP is forced by letting
the driver's outbox believe it is on another node (the bytes then take the real TCP path: handshake, MACs).
"""

import os
import signal
import socket
import sys
import threading
import time

import numpy as np
import pytest
import ray

from embodied_rl.runtime import Channel, Worker, WorkerGroup
from embodied_rl.runtime.channel import ChannelTimeout

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

PUT_LIMIT_S = 30.0  # far more than any of these puts needs when the transport works; they hang when it does not


def _call_in_thread(function, *args) -> dict:
    """Run ``function(*args)`` in a daemon thread (a hang must fail the test, not hold pytest); the dict gets
    ``done`` (an Event), then ``result`` or ``error``."""
    outcome = {"done": threading.Event()}

    def run():
        try:
            outcome["result"] = function(*args)
        except BaseException as error:  # handed to the test
            outcome["error"] = error
        finally:
            outcome["done"].set()

    threading.Thread(target=run, daemon=True).start()
    return outcome


class BusyReader(Worker):
    """Subscribes to ``data``, then stays busy (never reading) in ``hold`` until told to stop."""

    def __init__(self, channel, **kwargs):
        super().__init__(**kwargs)
        self.channel = channel
        self.channel.subscribe("data")

    def hold(self, release_path: str, limit_s: float) -> bool:
        """Busy until ``release_path`` exists (at most ``limit_s``): the inbox's owner reads nothing meanwhile."""
        deadline = time.monotonic() + limit_s
        open(release_path + ".holding", "w").close()
        while not os.path.exists(release_path):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def take(self, timeout: float) -> tuple[float, float, dict]:
        """(seconds ``get`` took, wall time of arrival, a summary of the item)."""
        start = time.monotonic()
        item = self.channel.get("data", timeout=timeout)
        took, arrived = time.monotonic() - start, time.time()
        return took, arrived, _summary(item)


def _summary(item) -> dict:
    if isinstance(item, dict):
        return {name: float(np.asarray(value, np.float64).sum()) for name, value in item.items()}
    return {"value": float(np.asarray(item, np.float64).sum())}


@pytest.fixture
def busy_reader(cluster, request):
    channel = Channel.create(f"test-busy-{request.node.name}", cluster, transport="auto")
    group = WorkerGroup(BusyReader, f"busy-{request.node.name}", 1, cpus_per_worker=0.1, channel=channel)
    yield channel, group.workers[0]
    group.kill()


def _put_while_busy(channel, reader, item, tmp_path) -> float:
    """Put ``item`` while ``reader`` is busy; returns how long the put took (fails if it does not return)."""
    release = tmp_path / "release"
    holding = reader.hold.remote(str(release), PUT_LIMIT_S + 30)
    deadline = time.monotonic() + 60
    while not (tmp_path / "release.holding").exists():  # the reader is busy from here on
        assert time.monotonic() < deadline, "the reader did not start holding within 60 s"
        time.sleep(0.02)
    try:
        start = time.monotonic()
        put = _call_in_thread(channel.put, item, "data", PUT_LIMIT_S)
        if not put["done"].wait(PUT_LIMIT_S + 5):
            pytest.fail(f"put did not return within {PUT_LIMIT_S + 5} s while the reader was busy")
        took = time.monotonic() - start
        if "error" in put:
            raise put["error"]
        assert not ray.wait([holding], timeout=0)[0], "the reader stopped being busy before the put returned"
    finally:
        release.touch()
    assert ray.get(holding, timeout=60)
    return took


def test_a_300_kb_message_of_small_inline_arrays_reaches_a_busy_reader_over_a_unix_socket(busy_reader, tmp_path):
    channel, reader = busy_reader
    # Each array is under the 64 KiB shared-memory threshold, so all 300 KB ride inline on the socket: more than
    # a Unix socket's buffers (~210 KB) hold.
    item = {f"step{i}": np.full(7_500, i, np.float32) for i in range(10)}
    assert set(channel.transport_to_readers("data").values()) == {"unix_socket"}
    _put_while_busy(channel, reader, item, tmp_path)
    took, _, summary = ray.get(reader.take.remote(2.0), timeout=60)
    assert took < 2.0
    assert summary == {f"step{i}": 7_500.0 * i for i in range(10)}


def test_a_40_mb_message_reaches_a_busy_reader_over_tcp(busy_reader, tmp_path):
    channel, reader = busy_reader
    outbox = channel._endpoints.outbox
    own_node = outbox.node_id
    outbox.node_id = "another-node"  # the reader looks remote to the driver: every byte goes over TCP
    try:
        assert set(channel.transport_to_readers("data").values()) == {"tcp"}
        item = np.ones(10_000_000, np.float32)  # 40 MB, far beyond TCP's socket buffers
        _put_while_busy(channel, reader, item, tmp_path)
        assert outbox.counters["tcp_bytes"] >= 40_000_000
    finally:
        outbox.node_id = own_node
        outbox.forget(ray.get(channel.directory.consumers.remote(channel.name, "data"))[0][0])
    took, _, summary = ray.get(reader.take.remote(2.0), timeout=60)
    assert took < 2.0
    assert summary == {"value": 10_000_000.0}


def test_a_silent_tcp_peer_does_not_hold_up_a_unix_socket_sender(busy_reader):
    channel, reader = busy_reader
    (address, _), = ray.get(channel.directory.consumers.remote(channel.name, "data"))
    silent = socket.create_connection((address.tcp_host, address.tcp_port), timeout=10)
    try:
        time.sleep(0.3)  # the inbox has accepted the silent peer and waits for its handshake
        taking = reader.take.remote(10.0)
        time.sleep(0.5)  # the reader is waiting in get
        sent = time.time()
        channel.put(np.arange(10, dtype=np.float32), "data", timeout=PUT_LIMIT_S)  # a new Unix connection
        _, arrived, summary = ray.get(taking, timeout=60)
        assert summary == {"value": 45.0}
        assert arrived - sent < 1.0, f"the Unix-socket message took {arrived - sent:.2f} s"
        # The silent peer is dropped once its handshake times out (5 s), not kept forever.
        silent.settimeout(15)
        start = time.monotonic()
        while silent.recv(4096):
            pass
        assert time.monotonic() - start < 10
    finally:
        silent.close()


def test_a_put_to_a_reader_that_takes_no_bytes_times_out_naming_the_key(cluster):
    channel = Channel.create("test-stalled-reader", cluster, transport="socket")
    group = WorkerGroup(BusyReader, "stalled", 1, cpus_per_worker=0.1, channel=channel)
    reader = group.workers[0]
    try:
        pid = ray.get(reader.process_id.remote())
        (address, _), = ray.get(channel.directory.consumers.remote(channel.name, "data"))
        os.kill(pid, signal.SIGSTOP)  # the whole process, its receiving threads included, takes no more bytes
        try:
            start = time.monotonic()
            put = _call_in_thread(channel.put, np.ones(2_000_000, np.float32), "data", 2.0)  # 8 MB inline
            if not put["done"].wait(PUT_LIMIT_S):
                pytest.fail(f"put to a stopped reader did not return within {PUT_LIMIT_S} s")
            assert time.monotonic() - start < 6.0
            error = put.get("error")
            assert isinstance(error, ChannelTimeout), f"expected ChannelTimeout, got {put}"
            assert "key 'data'" in str(error) and channel.name in str(error) and address.unix_path in str(error)
        finally:
            os.kill(pid, signal.SIGCONT)
        # The cut frame was dropped with its connection; the next put opens a new one and arrives whole.
        channel.put(np.full(3, 2.0, np.float32), "data", timeout=PUT_LIMIT_S)
        _, _, summary = ray.get(reader.take.remote(5.0), timeout=60)
        assert summary == {"value": 6.0}
    finally:
        group.kill()
