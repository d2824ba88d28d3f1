"""What dead runs leave (session directories, shared-memory segments) is swept, what live ones use is not, and a
receiver lets go of the segments of a sender whose connection closed."""

import gc
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import ray

from embodied_rl.runtime import Channel, Cluster, Worker, WorkerGroup
from embodied_rl.runtime.transports import session_files, shared_memory
from embodied_rl.runtime.transports.sockets import Inbox, Outbox

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _session(root, name: str, pids: list[int], shm_dir: str, start_times: dict | None = None) -> tuple[str, str]:
    """A session directory under ``root`` recording ``pids``, with one segment in ``shm_dir``."""
    path = os.path.join(root, name)
    os.makedirs(path, mode=0o700)
    for pid in pids:
        session_files.register_process(path, pid)
        if start_times and pid in start_times:
            with open(os.path.join(path, f"pid-{pid}"), "w") as record:
                record.write(start_times[pid])
    segment = os.path.join(shm_dir, f"{name}-0123abcd")
    open(segment, "w").close()
    return path, segment


def test_only_sessions_whose_processes_are_all_dead_are_swept(tmp_path, monkeypatch):
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setenv("EMBODIED_RL_SHM_DIR", str(shm))
    dead, dead_segment = _session(tmp_path, "erl-dead0001-aa", [_dead_pid(), _dead_pid()], str(shm))
    live, live_segment = _session(tmp_path, "erl-live0001-bb", [_dead_pid(), os.getpid()], str(shm))
    # This process's pid, recorded with another start time: a reused pid, so a dead session.
    reused, reused_segment = _session(tmp_path, "erl-reuse001-cc", [os.getpid()], str(shm), {os.getpid(): "1"})
    unknown = tmp_path / "erl-unknown1-dd"  # no pid file: cannot be judged (being created, or an older version)
    unknown.mkdir()
    removed = session_files.sweep_dead_sessions(root=str(tmp_path))
    assert sorted(removed) == sorted([dead, reused])
    assert not os.path.exists(dead) and not os.path.exists(dead_segment)
    assert not os.path.exists(reused) and not os.path.exists(reused_segment)
    assert os.path.isdir(live) and os.path.exists(live_segment) and unknown.is_dir()


# The next two tests keep their sessions under a private root (tmp_path), so no other process on the machine
# sweeps them first: only the process under test can have removed them.


def test_starting_a_cluster_sweeps_dead_runs_on_the_drivers_node(cluster, tmp_path, monkeypatch):
    monkeypatch.setattr(session_files, "SESSIONS_ROOT", str(tmp_path))
    dead, segment = _session(tmp_path, "erl-deadrun1-x", [_dead_pid()], shared_memory.shm_dir())
    second = Cluster()  # Ray is already up (the session's cluster): this only makes a new session
    try:
        assert os.path.dirname(second.session_dir) == str(tmp_path) and os.path.exists(dead)
        second.start()
        assert not os.path.exists(dead) and not os.path.exists(segment)
        assert session_files.session_alive(second.session_dir) is True  # the driver's own pid file
    finally:
        second.shutdown()


class Subscriber(Worker):
    def __init__(self, channel, sessions_root, **kwargs):
        super().__init__(**kwargs)
        session_files.SESSIONS_ROOT = sessions_root  # where this test keeps its sessions (see above)
        channel.subscribe("sweep")  # makes this process's endpoints


def test_a_process_making_its_endpoints_sweeps_its_node(cluster, tmp_path):
    dead, segment = _session(tmp_path, "erl-deadwrk1-x", [_dead_pid()], shared_memory.shm_dir())
    channel = Channel.create("test-sweep-on-endpoints", cluster)
    group = WorkerGroup(Subscriber, "sweeper", 1, cpus_per_worker=0.1, channel=channel,
                        sessions_root=str(tmp_path))
    try:
        assert not os.path.exists(dead) and not os.path.exists(segment)
        pid = ray.get(group.workers[0].process_id.remote())
        assert os.path.exists(os.path.join(cluster.session_dir, f"pid-{pid}"))  # it records itself
    finally:
        group.kill()


def _mapped(path: str) -> bool:
    with open("/proc/self/maps") as maps:
        return any(path in line for line in maps)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps")
def test_a_receiver_unmaps_the_segments_of_a_sender_whose_connection_closed(tmp_path):
    session_dir = tmp_path / "erl-unmap-test"
    session_dir.mkdir(mode=0o700)
    inbox = Inbox(str(session_dir), "node-a", "127.0.0.1", b"secret")
    sender = Outbox("node-a", b"secret", session_dir.name)
    try:
        sender.send(inbox.address, "c", "k", np.ones(100_000, np.float32), 1024, time.monotonic() + 10)
        (received,) = inbox.take("c", "k", 1, 5.0)
        np.testing.assert_array_equal(received, 1.0)
        segment = sender.encoder._pools[inbox.address].segments[0].path
        del received
        gc.collect()
        sender.forget(inbox.address)  # the sender goes (replaced, or removed)
        deadline = time.monotonic() + 5
        while _mapped(segment) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _mapped(segment), "the receiver still maps a closed sender's segment"
    finally:
        inbox.close()
