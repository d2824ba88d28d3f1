"""Atomic writes: a crash leaves the old file or the new one, never half of one."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


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


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def publish_directory(staging: Path, final: Path) -> None:
    """Move a fully written ``staging`` directory to ``final`` in one rename (replacing an old one)."""
    final = Path(final)
    if final.exists():
        old = final.with_name(f".{final.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(staging, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, final)
