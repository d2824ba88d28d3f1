"""The device lock across real Ray worker processes: mutual exclusion, FIFO order, atomic multi-slot turns."""

import os
import sys
import time

import pytest
import ray

from embodied_rl.runtime import DeviceLock, DeviceLockError, DeviceLockTimeout, Worker, WorkerGroup

# Worker classes defined here travel to Ray's worker processes by value (tests/ is not on their path).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Contender(Worker):
    """Takes turns on device slots; while holding a slot it owns a marker file, which no other holder may own."""

    def take_turns(self, lock, slots, holder, turns, hold_s, marker_dir) -> int:
        """``turns`` turns on ``slots``; returns how often a marker was already there (a broken exclusion)."""
        collisions = 0
        for _ in range(turns):
            with lock.hold(slots, holder, timeout=60):
                markers = [os.path.join(marker_dir, f"slot-{slot}") for slot in slots]
                for marker in markers:
                    try:
                        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
                    except FileExistsError:
                        collisions += 1
                time.sleep(hold_s)
                for marker in markers:
                    if os.path.exists(marker):
                        os.remove(marker)
        return collisions

    def take(self, lock, slots, holder, hold_s, timeout=60.0):
        record = lock.acquire(slots, holder, timeout)
        time.sleep(hold_s)
        lock.release(slots, holder)
        return record


@pytest.fixture(scope="module")
def contenders(cluster):
    group = WorkerGroup(Contender, "contender", 3, cpus_per_worker=0.1)
    yield group
    group.kill()


@pytest.fixture
def lock(cluster, request):
    made = DeviceLock.create(cluster.session_id, name=request.node.name)
    yield made
    made.close()


def _overlap(a, b) -> bool:
    return a.acquired_at < b.released_at and b.acquired_at < a.released_at


def _wait_for_queue(lock, length):
    deadline = time.time() + 30
    while len(lock.waiting()) < length:
        assert time.time() < deadline, f"queue never reached {length}: {lock.waiting()}"
        time.sleep(0.01)


def test_overlapping_slot_sets_are_never_held_at_the_same_time(contenders, lock, tmp_path):
    # [0,1] and [1,0] are the same set asked in opposite orders: slot-by-slot locking could deadlock here.
    wanted = [([0, 1], "a"), ([1, 2], "b"), ([1, 0], "c")]
    done = contenders.call_each("take_turns", [(lock, slots, holder, 8, 0.005, str(tmp_path))
                                               for slots, holder in wanted])
    assert ray.get(done, timeout=120) == [0, 0, 0]
    turns = lock.turns()
    assert len(turns) == 24 and all(t.released_at is not None for t in turns)
    assert {t.holder: t.slots for t in turns} == {"a": (0, 1), "b": (1, 2), "c": (0, 1)}
    for i, first in enumerate(turns):
        for second in turns[i + 1:]:
            if set(first.slots) & set(second.slots):
                assert not _overlap(first, second), f"{first} and {second} held a slot at the same time"
    assert lock.holders() == {}


def test_disjoint_slots_are_held_at_the_same_time(contenders, lock):
    with lock.hold([0], "driver", timeout=5):
        other = ray.get(contenders.call("take", lock, [1], "worker", 0.0, 5.0, ranks=[0])[0])
        assert other.waited_s < 5
    driver, worker = sorted(lock.turns(), key=lambda t: t.holder)
    assert _overlap(driver, worker)


def test_waiters_are_granted_in_arrival_order(contenders, lock):
    lock.acquire([0], "first")
    pending = []
    for rank in range(3):
        pending += contenders.call("take", lock, [0], f"waiter-{rank}", 0.02, ranks=[rank])
        _wait_for_queue(lock, rank + 1)
    assert [holder for holder, _ in lock.waiting()] == ["waiter-0", "waiter-1", "waiter-2"]
    lock.release([0], "first")
    ray.get(pending, timeout=60)
    assert [t.holder for t in lock.turns()] == ["first", "waiter-0", "waiter-1", "waiter-2"]


def test_a_multi_slot_waiter_holds_nothing_and_is_not_overtaken(contenders, lock):
    lock.acquire([0], "holder")
    wide = contenders.call("take", lock, [0, 1], "wide", 0.02, ranks=[0])
    _wait_for_queue(lock, 1)
    assert lock.holders() == {0: "holder"}  # all or none: "wide" took no part of its set while waiting
    narrow = contenders.call("take", lock, [1], "narrow", 0.0, ranks=[1])
    _wait_for_queue(lock, 2)  # slot 1 is free, but "wide" asked first
    unrelated = lock.acquire([2], "unrelated", timeout=5)  # nobody waits for slot 2: granted at once
    lock.release([2], "unrelated")
    lock.release([0], "holder")
    ray.get(wide + narrow, timeout=60)
    order = [t.holder for t in lock.turns()]
    assert order == ["holder", "unrelated", "wide", "narrow"], order
    assert unrelated.waited_s < 1


def test_a_timeout_names_the_holder_and_leaves_no_waiter_behind(lock):
    lock.acquire([3], "trainer")
    with pytest.raises(DeviceLockTimeout, match=r"'sampler' timed out after 0.3 s waiting for device slots "
                                                r"\[3, 4\]: slot 3 held by 'trainer'"):
        lock.acquire([4, 3], "sampler", timeout=0.3)
    assert lock.waiting() == [] and lock.holders() == {3: "trainer"}
    lock.release([3], "trainer")
    assert lock.acquire([3, 4], "sampler", timeout=1).slots == (3, 4)


def test_misuse_is_reported_in_one_line(lock):
    with pytest.raises(DeviceLockError, match=r"'nobody' does not hold slots \[0\]"):
        lock.release([0], "nobody")
    lock.acquire([0, 1], "actor")
    with pytest.raises(DeviceLockError, match="cannot wait for itself"):
        lock.acquire([1], "actor", timeout=1)
    with pytest.raises(DeviceLockError, match="at least one device slot"):
        lock.acquire([], "actor")
