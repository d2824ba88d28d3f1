"""Worker start-up has a deadline: a worker Ray cannot place, or whose constructor raises, fails the start with one
line naming the group, the ranks and the resources Ray had; a growth that fails is undone."""

import sys
import time

import pytest
import ray

from embodied_rl.runtime import Worker, WorkerGroup
from embodied_rl.runtime.deadlines import DeadlineExceeded, WorkerStartError, get_within

UNPLACEABLE_CPUS = 64  # the test cluster has 2

# Worker classes defined here travel to Ray's worker processes by value (tests/ is not on their path).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FailsOnRankOne(Worker):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if self.rank == 1:
            raise ValueError("no simulator on this node")


def test_a_group_ray_cannot_place_fails_within_its_start_deadline_naming_the_group(cluster):
    start = time.monotonic()
    with pytest.raises(WorkerStartError) as raised:
        WorkerGroup(Worker, "unplaceable", 2, cpus_per_worker=UNPLACEABLE_CPUS, start_timeout_s=3)
    assert time.monotonic() - start < 30
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("worker group 'unplaceable': ranks [0, 1] did not start within 3 s")
    assert f"'CPU': {UNPLACEABLE_CPUS}" in message and "available of" in message  # what it asked, what Ray had
    assert ray.available_resources().get("CPU", 0) >= 1  # the pending workers were given up, nothing holds CPUs


def test_a_growth_that_cannot_start_is_undone_and_the_group_keeps_working(cluster):
    group = WorkerGroup(FailsOnRankOne, "grows", 1, cpus_per_worker=0.1, start_timeout_s=60)
    try:
        with pytest.raises(WorkerStartError, match=r"worker group 'grows': rank 1 failed to start: "
                                                   r"ValueError: no simulator on this node"):
            group.resize(2)
        assert len(group) == 1 and group.world_size == 1
        assert ray.get(group.call("ping"), timeout=30) == ["grows:0"]
        with pytest.raises(WorkerStartError, match=r"ranks \[1\] did not start within 2 s"):
            group.start_timeout_s = 2
            group.resize(2, cpus_per_new_worker=UNPLACEABLE_CPUS)
        assert len(group) == 1 and group.cpus_per_worker == 0.1  # what a later growth declares is unchanged
    finally:
        group.kill()


def test_get_within_names_what_it_waited_for(cluster):
    @ray.remote(num_cpus=0)
    def sleeper():
        time.sleep(30)

    with pytest.raises(DeadlineExceeded, match=r"^the sleeper did not finish within 0.5 s$"):
        get_within(sleeper.remote(), 0.5, "the sleeper")


class RecordsItsArguments(Worker):
    def __init__(self, label: str, **kwargs):
        super().__init__(**kwargs)
        self.label = label

    def described(self) -> tuple:
        import os

        return self.label, self.rank, os.getpid()


def test_prestarted_processes_become_the_ranks_with_arguments_known_later(cluster):
    from embodied_rl.runtime.worker import Prestarted

    early = Prestarted(RecordsItsArguments, 2, cpus_per_worker=0.1)
    pids = ray.get([process.process_id.remote() for process in early.processes], timeout=60)
    with pytest.raises(ValueError, match="do not fit a group of 3 x RecordsItsArguments"):
        WorkerGroup(RecordsItsArguments, "late", 3, cpus_per_worker=0.1, prestarted=early, label="x")
    group = WorkerGroup(RecordsItsArguments, "late", 2, cpus_per_worker=0.1, prestarted=early, label="known now")
    try:
        described = ray.get(group.call("described"), timeout=60)
        assert described == [("known now", 0, pids[0]), ("known now", 1, pids[1])]  # the same processes, constructed
        assert ray.get(group.call("ping"), timeout=30) == ["late:0", "late:1"]
    finally:
        group.kill()
