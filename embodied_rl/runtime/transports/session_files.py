"""A session's files on a node, who is alive in it, and the sweep of what dead runs left behind.

A cluster session has a private directory ``/tmp/erl-<session id>-<suffix>`` (mode 0700) on every node it
uses: the driver's ``Cluster`` makes it on its node, each process's channel endpoints make it on theirs. It
holds the inboxes' Unix sockets and one pid file per process of the session on that node
(``pid-<pid>``, holding the process's start time so a reused pid does not count as alive). Its shared-memory
segments are ``<shm dir>/<directory name>-...``.

A directory whose pid files all name dead processes belongs to a run that ended without cleaning up (killed
driver, crashed node): ``sweep_dead_sessions`` removes it and its segments. A directory with no pid file at all
is left alone (a session being created, or one started by a version without pid files: it cannot be judged).
"""

from __future__ import annotations

import logging
import os
import shutil

from embodied_rl.runtime.transports.shared_memory import sweep_segments

log = logging.getLogger("embodied_rl.channel")

SESSIONS_ROOT = "/tmp"
SESSION_PREFIX = "erl-"
PID_PREFIX = "pid-"


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot) or None if it is not running.

    Without ``/proc`` a running process gives "" (alive, start time unknown).
    """
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except FileNotFoundError:
        if not os.path.isdir("/proc/self"):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return None
            except PermissionError:
                pass
            return ""
        return None
    except (OSError, IndexError):
        return None


def register_process(session_dir: str, pid: int | None = None) -> str:
    """Record ``pid`` (default: this process) as alive in ``session_dir``; returns the pid file's path."""
    pid = os.getpid() if pid is None else pid
    path = os.path.join(session_dir, f"{PID_PREFIX}{pid}")
    with open(path, "w") as record:
        record.write(process_start_time(pid) or "")
    return path


def session_alive(session_dir: str) -> bool | None:
    """True if a process recorded in ``session_dir`` still runs, False if all recorded ones are dead,
    None if it records none (it cannot be judged)."""
    try:
        names = [name for name in os.listdir(session_dir) if name.startswith(PID_PREFIX)]
    except OSError:
        return None
    if not names:
        return None
    for name in names:
        try:
            pid = int(name[len(PID_PREFIX):])
            with open(os.path.join(session_dir, name)) as record:
                recorded = record.read().strip()
        except (ValueError, OSError):
            continue
        started = process_start_time(pid)
        if started is not None and (not recorded or not started or started == recorded):
            return True
    return False


def sweep_dead_sessions(keep: str | None = None, root: str | None = None) -> list[str]:
    """Remove the session directories under ``root`` (default ``SESSIONS_ROOT``) whose processes are all dead,
    with their shared-memory segments; ``keep`` is never touched. Returns the directories removed."""
    root = SESSIONS_ROOT if root is None else root
    removed = []
    try:
        names = sorted(name for name in os.listdir(root) if name.startswith(SESSION_PREFIX))
    except OSError:
        return removed
    for name in names:
        path = os.path.join(root, name)
        if (keep is not None and os.path.abspath(path) == os.path.abspath(keep)) or not os.path.isdir(path):
            continue
        if session_alive(path) is False:
            segments = sweep_segments(name)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            log.info("swept the files of dead session %s (%d shared-memory segments)", name, segments)
    return removed
