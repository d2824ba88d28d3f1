"""Same-node shared memory for large array payloads: the socket carries only names, never the bytes.

Messages are pickled with protocol 5; every out-of-band buffer (numpy arrays, PickleBuffer) of at least
``threshold`` bytes is written once into a fresh file in ``/dev/shm`` and replaced by its name. The receiver maps
the file, unlinks it at once (nothing leaks if either side dies later) and rebuilds the arrays on the mapping
itself, without a copy; the mapping is released when the last array that uses it is garbage collected.
"""

from __future__ import annotations

import mmap
import os
import pickle
import uuid

SHM_DIR = "/dev/shm"
DEFAULT_THRESHOLD = 64 * 1024


def shared_memory_available() -> bool:
    return os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)


def encode(obj, threshold: int = DEFAULT_THRESHOLD) -> tuple[bytes, list]:
    """``obj`` -> (pickle bytes, buffer descriptors): ``("inline", bytes)`` or ``("shm", path, size)``."""
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    descriptors = []
    for buffer in buffers:
        view = buffer.raw()
        if view.nbytes >= threshold:
            descriptors.append(("shm", _write_segment(view), view.nbytes))
        else:
            descriptors.append(("inline", bytes(view)))
    return payload, descriptors


def decode(payload: bytes, descriptors: list):
    buffers = [_map_segment(d[1], d[2]) if d[0] == "shm" else d[1] for d in descriptors]
    return pickle.loads(payload, buffers=buffers)


def discard(descriptors: list) -> None:
    """Remove segments that were written but will never be read (the send failed)."""
    for descriptor in descriptors:
        if descriptor[0] == "shm":
            try:
                os.unlink(descriptor[1])
            except FileNotFoundError:
                pass


def _write_segment(view: memoryview) -> str:
    path = os.path.join(SHM_DIR, f"erl-{uuid.uuid4().hex}")
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, view.nbytes)
        with mmap.mmap(fd, view.nbytes) as mapping:
            mapping[:] = view.cast("B")
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)
    return path


def _map_segment(path: str, size: int) -> memoryview:
    fd = os.open(path, os.O_RDWR)
    try:
        mapping = mmap.mmap(fd, size)
    finally:
        os.close(fd)
        os.unlink(path)
    return memoryview(mapping)
