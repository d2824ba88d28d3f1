"""Channel semantics across real Ray actor processes."""

import os
import sys
import time

import numpy as np
import pytest
import ray

from embodied_rl.runtime import Channel, Worker, WorkerGroup
from embodied_rl.runtime.channel import ChannelTimeout

# Worker classes defined here travel to Ray's worker processes by value (tests/ is not on their path).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Doubler(Worker):
    """Reads ``("x", value, reply_key)`` from key ``work``, writes ``(rank, 2 * value)`` to ``reply_key``."""

    def __init__(self, channel, **kwargs):
        super().__init__(**kwargs)
        self.channel = channel
        self.channel.subscribe("work")

    def serve(self, count=None):
        """Answer ``count`` items, or (``count=None``) every item until a ``None`` arrives; returns how many."""
        handled = 0
        while count is None or handled < count:
            item = self.channel.get("work", timeout=60)
            if item is None:
                break
            _, value, reply_key = item
            self.channel.put((self.rank, value * 2), reply_key)
            handled += 1
        return handled


@pytest.fixture(scope="module")
def doublers(cluster):
    channel = Channel.create("test-doublers", cluster)
    group = WorkerGroup(Doubler, "doubler", 2, cpus_per_worker=0.1, channel=channel)
    yield channel, group
    group.kill()


def test_items_reach_readers_and_replies_come_back(doublers):
    channel, group = doublers
    serving = group.call("serve")
    payload = np.arange(12, dtype=np.float32).reshape(3, 4)
    for i in range(6):
        channel.put(("x", payload + i, "replies"), "work")
    replies = []
    while len(replies) < 6:
        replies.extend(channel.get_batch("replies", timeout=60))
    assert sorted(float(v.sum()) for _, v in replies) == sorted(float((payload + i).sum() * 2) for i in range(6))
    assert channel.put_to_every_reader(None, "work") == 2
    # Two readers of one key share its items (by load, not necessarily three each): every item answered once.
    handled = ray.get(serving)
    assert sum(handled) == 6
    assert sorted(rank for rank, _ in replies) == sorted(r for r, n in enumerate(handled) for _ in range(n))


def test_get_times_out_with_a_clear_error(cluster):
    channel = Channel.create("test-timeout", cluster)
    with pytest.raises(ChannelTimeout, match="no item for key 'empty'"):
        channel.get("empty", timeout=0.2)


def test_in_process_put_and_get_keep_order_and_identity(cluster):
    channel = Channel.create("test-local", cluster)
    channel.subscribe("k")
    items = [np.full(3, i) for i in range(5)]
    for item in items:
        channel.put(item, "k")
    received = channel.get_batch("k", max_items=3)
    assert [int(x[0]) for x in received] == [0, 1, 2]
    assert received[0] is items[0]  # same process: delivered without a copy
    assert [int(x[0]) for x in channel.get_batch("k")] == [3, 4]


def test_channel_handle_survives_pickling_to_a_worker_and_keys_are_independent(doublers):
    channel, group = doublers
    channel.subscribe("a")
    channel.subscribe("b")
    channel.put(1, "b")
    channel.put(2, "a")
    assert channel.get("a", timeout=5) == 2
    assert channel.get("b", timeout=5) == 1


def test_a_reader_that_died_is_dropped_and_items_go_to_the_survivors(cluster):
    channel = Channel.create("test-dead-reader", cluster)
    group = WorkerGroup(Doubler, "doubler-dead", 2, cpus_per_worker=0.1, channel=channel)
    try:
        pid = ray.get(group.workers[0].process_id.remote())
        ray.kill(group.workers[0], no_restart=True)
        deadline = time.time() + 60
        while _alive(pid) and time.time() < deadline:  # the process itself, not only Ray's record of it
            time.sleep(0.1)
        serving = group.workers[1].serve.remote(4)
        for i in range(4):
            channel.put(("x", i, "dead-replies"), "work")
        replies = []
        while len(replies) < 4:
            replies.extend(channel.get_batch("dead-replies", timeout=60))
        assert sorted(v for _, v in replies) == [0, 2, 4, 6]
        assert {rank for rank, _ in replies} == {1}
        assert ray.get(serving) == 4
        assert len(ray.get(channel.directory.consumers.remote(channel.name, "work"))) == 1
    finally:
        group.kill()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class PacedReader(Worker):
    """Takes items from key ``work`` one at a time, spending ``seconds_per_item`` on each."""

    def __init__(self, channel, seconds_per_item, **kwargs):
        super().__init__(**kwargs)
        self.channel = channel
        self.seconds_per_item = seconds_per_item
        self.channel.subscribe("work")

    def serve(self, reply_key):
        while True:
            item = self.channel.get("work", timeout=60)
            if item is None:
                return True
            time.sleep(self.seconds_per_item[self.rank])
            self.channel.put(self.rank, reply_key)


def test_an_idle_reader_takes_the_next_item_and_a_slow_one_is_passed_over(cluster):
    channel = Channel.create("test-least-loaded", cluster)
    group = WorkerGroup(PacedReader, "paced", 2, cpus_per_worker=0.1, channel=channel,
                        seconds_per_item=[0.5, 0.01])
    try:
        channel.subscribe("paced-replies")
        serving = group.call("serve", "paced-replies")
        for i in range(20):
            channel.put(i, "work")
            time.sleep(0.03)
        handled = []
        while len(handled) < 20:
            handled.extend(channel.get_batch("paced-replies", timeout=60))
        assert channel.put_to_every_reader(None, "work") == 2
        ray.get(serving)
        # Round-robin would give the slow reader 10 items (5 s of work); by load it gets only what arrives
        # while it is idle.
        assert handled.count(0) <= 3, handled
        assert handled.count(1) >= 17
    finally:
        group.kill()


class Summer(Worker):
    """Reads items from key ``bulk`` and answers each on ``sums`` with the sum of its ``"array"`` and ``"tensor"``."""

    def __init__(self, channel, **kwargs):
        super().__init__(**kwargs)
        self.channel = channel
        self.channel.subscribe("bulk")

    def serve(self, count: int) -> int:
        for _ in range(count):
            item = self.channel.get("bulk", timeout=60)
            self.channel.put((item["index"], float(item["array"].sum()), float(item["tensor"].double().sum()),
                              str(item["tensor"].dtype), item["note"]), "sums")
        return count


def test_a_collective_channel_sends_large_buffers_on_a_gloo_pair_and_small_ones_inline(cluster):
    """The pair forms on the first large buffer; each 1 MB buffer goes on it (counted), the 16-byte one inline, and
    the reader rebuilds every array, tensor (bf16 too) and plain value exactly."""
    import torch

    channel = Channel.create("test-collective", cluster, transport="collective")
    group = WorkerGroup(Summer, "summer", 1, cpus_per_worker=0.1, channel=channel)
    try:
        serving = group.workers[0].serve.remote(3)
        before = channel.traffic()
        items = [dict(index=i, array=np.full(1 << 18, i + 1, dtype=np.float32),
                      tensor=torch.full((1 << 19,), 0.5 * i, dtype=torch.bfloat16), note=np.arange(4, dtype=np.int32))
                 for i in range(3)]
        for item in items:
            channel.put(item, "bulk")
        assert set(channel.transport_to_readers("bulk").values()) == {"gloo_point_to_point"}
        answers = sorted(channel.get("sums", timeout=60) for _ in range(3))
        assert ray.get(serving) == 3
        after = channel.traffic()
        assert [a[:4] for a in answers] == [(i, float((i + 1) << 18), 0.5 * i * (1 << 19), "torch.bfloat16")
                                            for i in range(3)]
        assert all(np.array_equal(a[4], np.arange(4)) for a in answers)
        assert after.get("point_to_point_buffers", 0) - before.get("point_to_point_buffers", 0) == 6
        assert after["point_to_point_bytes"] - before.get("point_to_point_bytes", 0) == 6 << 20
        assert after["unix_socket_bytes"] - before.get("unix_socket_bytes", 0) < 6 << 10  # frames, not tensors
    finally:
        group.kill()
