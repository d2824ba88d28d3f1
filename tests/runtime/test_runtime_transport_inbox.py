"""An inbox and outbox in one process, over their real sockets: what the frames carry arrives whole, in order,
whatever its shape, and what cannot be decoded is reported to the reader instead of being lost."""

import threading
import time

import numpy as np
import pytest

from embodied_rl.runtime.reader_load import ReaderLoad, ReaderLoads
from embodied_rl.runtime.transports import shared_memory
from embodied_rl.runtime.transports.sockets import Inbox, Outbox


class _Unloadable:
    """Pickles fine; unpickling it raises (a class the reader cannot rebuild)."""

    def __reduce__(self):
        return _refuse, ()


def _refuse():
    raise ValueError("this message cannot be rebuilt here")


@pytest.fixture(params=["unix_socket", "tcp"])
def pair(request, tmp_path):
    session_dir = tmp_path / "erl-inbox-test"
    session_dir.mkdir(mode=0o700)
    inbox = Inbox(str(session_dir), "node-a", "127.0.0.1", b"secret")
    sender = Outbox("node-a" if request.param == "unix_socket" else "node-b", b"secret", session_dir.name)
    assert sender.transport_to(inbox.address) == request.param
    yield inbox, sender
    sender.forget(inbox.address)
    inbox.close()
    shared_memory.sweep_segments(session_dir.name)


def _send(sender, inbox, item, key="k", threshold=64 * 1024):
    sender.send(inbox.address, "c", key, item, threshold, time.monotonic() + 30)


def _take(inbox, key: str, count: int, within_s: float = 20.0) -> list:
    """``count`` items of ``key``; fails if they do not all arrive within ``within_s``."""
    received, deadline = [], time.monotonic() + within_s
    while len(received) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"{len(received)} of {count} items of key {key!r} arrived within {within_s} s"
        received += inbox.take("c", key, count - len(received), left)
    return received


def test_many_arrays_and_empty_ones_arrive_whole_and_in_order(pair):
    inbox, sender = pair
    # 1,500 out-of-band buffers: more than one sendmsg call takes (512), with empty ones among them.
    message = [np.full(i % 7, i, np.int32) for i in range(1_500)]
    for round_number in range(3):
        _send(sender, inbox, (round_number, message))
    received = _take(inbox, "k", 3)
    assert [number for number, _ in received] == [0, 1, 2]
    for _, arrays in received:
        assert all(np.array_equal(a, b) for a, b in zip(arrays, message)) and len(arrays) == len(message)


def test_an_item_that_cannot_be_decoded_raises_at_take_and_the_connection_goes_on(pair):
    inbox, sender = pair
    _send(sender, inbox, "before")
    _send(sender, inbox, _Unloadable())
    _send(sender, inbox, "after")
    deadline = time.monotonic() + 10
    while inbox.qsize("c", "k") < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert inbox.take("c", "k", 10, 1.0) == ["before"]  # stops short of the broken item
    with pytest.raises(RuntimeError, match="key 'k' on channel 'c' arrived but could not be decoded"):
        inbox.take("c", "k", 10, 1.0)
    assert inbox.take("c", "k", 10, 1.0) == ["after"]


def test_threads_sending_at_once_do_not_interleave_their_frames(pair):
    inbox, sender = pair

    def send_many(offset):
        for i in range(20):
            _send(sender, inbox, np.full(30_000, offset + i, np.float64), key=f"t{offset}")  # 240 KB

    threads = [threading.Thread(target=send_many, args=(offset,)) for offset in (0, 100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for offset in (0, 100):
        received = _take(inbox, f"t{offset}", 20)
        assert [int(a[0]) for a in received] == list(range(offset, offset + 20))
        assert all(a.min() == a.max() for a in received)


def test_take_waits_its_timeout_then_returns_nothing(pair):
    inbox, _ = pair
    start = time.monotonic()
    assert inbox.take("c", "empty", 1, 0.3) == []
    assert 0.25 <= time.monotonic() - start < 2.0


def test_a_readers_backlog_is_published_when_items_arrive_not_when_it_reads(pair, tmp_path):
    inbox, sender = pair
    load = ReaderLoad(shared_memory.segment_prefix("erl-inbox-test"))
    try:
        inbox.queues.watch(("c", "k"), load)
        for i in range(3):
            _send(sender, inbox, i)
        loads, deadline = ReaderLoads(), time.monotonic() + 10
        while loads.load(load.path) != 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loads.load(load.path) == 3  # 3 queued, not busy
        assert inbox.take("c", "k", 2, 1.0) == [0, 1]
        assert loads.load(load.path) == 2  # 1 queued + busy
    finally:
        load.close()
