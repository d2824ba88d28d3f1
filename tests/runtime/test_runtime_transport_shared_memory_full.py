"""A shared-memory directory too small for a message: the buffer rides inline and the process lives.

A real 1 MiB tmpfs is mounted for the test (root only; skipped with the reason otherwise), and the sending
runs in a subprocess, so a SIGBUS (what writing into an unreserved tmpfs file does when it is full) shows as a
failed test rather than a dead pytest.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import REPO
from embodied_rl.runtime.reader_load import ReaderLoad
from embodied_rl.runtime.transports import shared_memory

SEND_THROUGH_A_FULL_TMPFS = textwrap.dedent("""
    import json, logging, os, sys, tempfile, time
    import numpy as np
    from embodied_rl.runtime.transports import shared_memory
    from embodied_rl.runtime.transports.sockets import Inbox, Outbox

    logging.basicConfig(level=logging.WARNING)
    shared_memory.SHM_DIR = sys.argv[1]  # the 1 MiB tmpfs
    session_dir = tempfile.mkdtemp(prefix="erl-shmfull-")
    inbox = Inbox(session_dir, "node-a", "127.0.0.1", b"secret")
    outbox = Outbox("node-a", b"secret", os.path.basename(session_dir))  # same node: a Unix socket
    message = {"big": np.arange(1_000_000, dtype=np.float32),  # 4 MB: more than the tmpfs holds
               "medium": np.full(25_000, 7.0, np.float32)}  # 100 KB: fits
    outbox.send(inbox.address, "c", "k", message, 64 * 1024)
    outbox.send(inbox.address, "c", "k", message, 64 * 1024)
    received = inbox.take("c", "k", 2, 10.0)
    received += inbox.take("c", "k", 2, 10.0) if len(received) < 2 else []
    print(json.dumps({"intact": all(np.array_equal(item[name], message[name]) for item in received
                                    for name in message) and len(received) == 2,
                      "counters": dict(outbox.counters)}))
    inbox.close()
""")


@pytest.fixture
def small_tmpfs(tmp_path):
    """A freshly mounted 1 MiB tmpfs, unmounted after the test."""
    mount_point = tmp_path / "small-shm"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=1777", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield str(mount_point)
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(mount_point)], check=True)  # a mapping still open in here


def test_a_4_mb_message_in_a_1_mib_tmpfs_travels_inline_and_the_sender_survives(small_tmpfs):
    done = subprocess.run([sys.executable, "-c", SEND_THROUGH_A_FULL_TMPFS, small_tmpfs], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, f"the sender died (return code {done.returncode}): {done.stderr[-3000:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["intact"]
    counters = report["counters"]
    assert counters["shared_memory_fallbacks"] == 2  # the 4 MB array, each time
    assert counters["shared_memory_buffers"] == 2  # the 100 KB array still went through shared memory
    warnings = [line for line in done.stderr.splitlines() if "is full" in line]
    assert len(warnings) == 1 and small_tmpfs in warnings[0] and "bytes free" in warnings[0]  # logged once


def test_creating_a_segment_in_a_full_tmpfs_raises_enospc_and_leaves_no_file(small_tmpfs):
    prefix = os.path.join(small_tmpfs, "erl-full-")
    with pytest.raises(OSError) as raised:
        shared_memory.create_segment(prefix, 4 << 20)
    assert raised.value.errno == 28 and small_tmpfs in str(raised.value)
    assert os.listdir(small_tmpfs) == []


def test_a_reader_load_cell_without_room_in_shared_memory_is_private(small_tmpfs):
    filler = os.path.join(small_tmpfs, "filler")
    with open(filler, "wb") as file:
        os.posix_fallocate(file.fileno(), 0, shared_memory.free_bytes(small_tmpfs))
    load = ReaderLoad(os.path.join(small_tmpfs, "erl-full-"))
    assert load.path is None  # senders rotate round-robin for this key instead of reading its load
    load.update(3, True)
    load.close()


def test_the_shared_memory_directory_is_read_from_the_environment_at_each_call(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBODIED_RL_SHM_DIR", str(tmp_path))
    assert shared_memory.segment_prefix("erl-x").startswith(str(tmp_path))
    path, _, mapping = shared_memory.create_segment(shared_memory.segment_prefix("erl-x"), 100)
    mapping.close()
    assert shared_memory.sweep_segments("erl-x") == 1 and not os.path.exists(path)
    np.testing.assert_equal(os.listdir(tmp_path), [])
