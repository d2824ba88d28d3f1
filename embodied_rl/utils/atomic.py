"""Atomic, durable writes: a crash (of the process or of the machine) leaves the old file or the new one, never half
of one.

Durability costs one ``fsync`` per file written plus one per directory whose entries changed: the data reaches the
disk before the rename that publishes it, and the rename itself is flushed by an ``fsync`` of the directory holding
it (without that, a power loss can undo a rename that a later write already relied on).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

STAGING_PREFIX = ".staging-"
"""Hidden directories a publish writes into before its rename (``.staging-<pid>-<random>``)."""

STAGING_MAX_AGE_S = 600.0
"""A staging directory this old is a leftover even when its writer's pid is alive (pid reuse, another machine)."""


def fsync_path(path: Path) -> None:
    """Flush a file's data, or a directory's entries, to the disk."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if Path(path).is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_path(path.parent)  # the rename itself


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def make_staging_directory(parent: Path) -> Path:
    """A fresh hidden directory in ``parent`` to fill and then ``publish_directory``; named after this process, so
    that ``sweep_publish_leftovers`` can tell a dead writer's leftovers from a live one's work."""
    staging = Path(tempfile.mkdtemp(dir=parent, prefix=f"{STAGING_PREFIX}{os.getpid()}-"))
    staging.chmod(0o755)
    return staging


def publish_directory(staging: Path, final: Path) -> None:
    """Move a fully written ``staging`` directory to ``final`` in one rename (replacing an old one), durably: every
    file in it and the directory itself are flushed first, the parent's entries after the rename."""
    staging, final = Path(staging), Path(final)
    for root, _, files in os.walk(staging):
        for name in files:
            fsync_path(Path(root) / name)
        fsync_path(Path(root))
    if final.exists():
        old = final.with_name(f".{final.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        try:
            os.replace(staging, final)
        except BaseException:  # an interrupt between the two renames: the old one goes back (else the sweep does)
            if not final.exists():
                os.replace(old, final)
            raise
        fsync_path(final.parent)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, final)
        fsync_path(final.parent)


DELETING_PREFIX = ".deleting-"


def remove_directory(path: Path) -> None:
    """Delete a published directory: renamed out of sight first (one atomic step), then removed, so a crash
    mid-way never leaves a half-deleted directory under its published name (the sweep removes the rest)."""
    path = Path(path)
    doomed = path.with_name(f"{DELETING_PREFIX}{path.name}")
    shutil.rmtree(doomed, ignore_errors=True)
    try:
        os.replace(path, doomed)
    except FileNotFoundError:
        return
    shutil.rmtree(doomed, ignore_errors=True)


def _writer_is_gone(staging: Path) -> bool:
    """Whether the process named in a ``.staging-<pid>-...`` directory has exited (False when it cannot tell)."""
    pid = staging.name[len(STAGING_PREFIX):].split("-", 1)[0]
    if not pid.isdigit():
        return False  # an older name without the pid: its age decides
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, someone else's
    return False


def sweep_publish_leftovers(parent: Path, max_age_s: float = STAGING_MAX_AGE_S) -> list[str]:
    """Clean what crashed publishes left in ``parent``: ``.staging-*`` directories of writers that exited (or
    older than ``max_age_s``) and ``.deleting-*`` ones are removed; a ``.<name>.old`` (a replace cut between its
    two renames) is renamed back to ``<name>`` when that is missing, else removed. Returns one phrase per thing
    done."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    done, now = [], time.time()
    for entry in sorted(parent.iterdir()):
        if entry.name.startswith(STAGING_PREFIX) and entry.is_dir():
            try:
                age = now - entry.stat().st_mtime
            except FileNotFoundError:
                continue
            if entry.name.startswith(f"{STAGING_PREFIX}{os.getpid()}-") and age <= max_age_s:
                continue  # this process's own save in progress
            if _writer_is_gone(entry) or age > max_age_s:
                shutil.rmtree(entry, ignore_errors=True)
                done.append(f"removed {entry.name}")
        elif entry.name.startswith(DELETING_PREFIX) and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
            done.append(f"removed {entry.name}")
        elif entry.name.startswith(".") and entry.name.endswith(".old") and entry.is_dir():
            original = parent / entry.name[1:-len(".old")]
            if original.exists():
                shutil.rmtree(entry, ignore_errors=True)
                done.append(f"removed {entry.name}")
            else:
                os.replace(entry, original)
                done.append(f"restored {original.name} from {entry.name}")
    if done:
        fsync_path(parent)
    return done
