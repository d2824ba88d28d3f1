"""Same-node shared memory segments (files in ``/dev/shm``) that carry array bytes between processes.

A segment is a file whose first page is a header and whose data starts at ``DATA_OFFSET`` (page aligned, so
arrays built on it are aligned). Three kinds, chosen per buffer by ``encoding``:

* **pooled**: a sender keeps a pool of segments per receiving process. A segment is created once, mapped with
  ``MAP_POPULATE`` (its pages are faulted in once, not at every message), filled with one ``memcpy`` per message
  and reused: the receiver maps it once (then unlinks the file, so nothing outlives the two processes), caches
  the mapping, and writes ``FREE`` into the header byte when the last array built on the message is garbage
  collected. A fresh file per message measured 0.82 GB/s for 100 MB here, mostly page faults.
* **shared**: an array allocated with ``SharedArrays.empty`` lives in a segment from the start; sending it moves
  only its name and offset, no bytes (the semantics of torch's ``share_memory_()``: both sides see one memory).
* **one-off**: a fresh segment per message, unlinked by the receiver as soon as it is mapped, freed when its
  arrays are; used when a pool stays full for ``POOL_WAIT_S`` (a receiver that keeps the arrays it gets: it should
  copy what it keeps) or a message is bigger than the pool.

A full pool is back-pressure: the sender waits until the receiver releases a segment, so a slow receiver bounds
the shared memory a fast sender can fill (``POOL_BYTES_PER_RECEIVER``) instead of letting it grow.

Segment names start with the session's tag (``erl-<session id>-...``) so the cluster sweeps what a crashed
process left behind (see ``session_files``).

Space is reserved when a segment is created (``posix_fallocate``): on a full tmpfs creating it fails with
``ENOSPC``, where writing to a merely truncated file would kill the process with SIGBUS. The encoder then sends
that buffer inline instead. The directory is ``/dev/shm`` unless ``EMBODIED_RL_SHM_DIR`` names another (read at
each call, so tests can point it at a small tmpfs).
"""

from __future__ import annotations

import errno
import mmap
import os
import time
import uuid
import weakref

import numpy as np

SHM_DIR = "/dev/shm"
DEFAULT_THRESHOLD = 64 * 1024
DATA_OFFSET = mmap.PAGESIZE
FREE, IN_FLIGHT = 0, 1
POOL_BYTES_PER_RECEIVER = 1 << 30  # a sender's pooled bytes per receiver: the bound of its back-pressure
POOL_WAIT_S = 10.0  # how long a sender waits for a full pool before it falls back to a one-off segment


def shm_dir() -> str:
    """Where segments live: ``$EMBODIED_RL_SHM_DIR`` if set, else ``SHM_DIR``."""
    return os.environ.get("EMBODIED_RL_SHM_DIR") or SHM_DIR


def free_bytes(directory: str | None = None) -> int:
    """Bytes an unprivileged writer can still allocate in ``directory`` (default: ``shm_dir()``); -1 if unknown."""
    try:
        stats = os.statvfs(directory or shm_dir())
    except OSError:
        return -1
    return stats.f_bavail * stats.f_frsize


def shared_memory_available() -> bool:
    directory = shm_dir()
    return os.path.isdir(directory) and os.access(directory, os.W_OK)


def segment_prefix(session_tag: str) -> str:
    """Path prefix of a session's segments; ``session_tag`` is the name of its private directory (``erl-...``)."""
    return os.path.join(shm_dir(), f"{session_tag}-")


def remove_segment(path: str) -> bool:
    """Unlink a segment file; False if it was already gone (a receiver unlinks what it maps)."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def sweep_segments(session_tag: str) -> int:
    """Remove every segment file of a session (what crashed processes left); returns how many."""
    directory = shm_dir()
    prefix = os.path.basename(segment_prefix(session_tag))
    names = os.listdir(directory) if os.path.isdir(directory) else ()
    return sum(remove_segment(os.path.join(directory, name)) for name in names if name.startswith(prefix))


def create_segment(prefix: str, data_bytes: int) -> tuple[str, int, mmap.mmap]:
    """A new segment with ``data_bytes`` after its header page: (path, size, mapping), pages faulted in.

    Its space is reserved first: raises ``OSError`` (``ENOSPC`` naming the directory and its free bytes) when
    the file system cannot hold it, never a later SIGBUS.
    """
    path = f"{prefix}{uuid.uuid4().hex}"
    size = DATA_OFFSET + data_bytes
    directory = os.path.dirname(path)
    free = free_bytes(directory)
    if 0 <= free < size:
        raise OSError(errno.ENOSPC, f"{directory} has {free} bytes free, a segment needs {size}")
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as error:
            if error.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                raise OSError(error.errno, f"{directory} cannot hold a {size}-byte segment "
                                           f"({free_bytes(directory)} bytes free): {error.strerror}") from error
            os.ftruncate(fd, size)  # a file system without fallocate (not tmpfs): size it the old way
        mapping = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)
    return path, size, mapping


def map_segment(path: str, size: int, unlink: bool) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
    finally:
        os.close(fd)
        if unlink:
            os.unlink(path)


def _address(view) -> int:
    return np.frombuffer(view, np.uint8).__array_interface__["data"][0] if len(view) else 0


class _PooledSegment:
    def __init__(self, prefix: str, data_bytes: int):
        self.path, self.size, self.mapping = create_segment(prefix, data_bytes)
        self.data_bytes = data_bytes
        self.data = np.frombuffer(self.mapping, np.uint8, data_bytes, DATA_OFFSET)

    @property
    def free(self) -> bool:
        return self.mapping[0] == FREE


class SegmentPool:
    """A sender's reusable segments for one receiving process."""

    def __init__(self, prefix: str, max_bytes: int | None = None):
        self.prefix = prefix
        self.max_bytes = POOL_BYTES_PER_RECEIVER if max_bytes is None else max_bytes
        self.segments: list[_PooledSegment] = []

    def write(self, view: memoryview, wait_s: float = 0.0) -> tuple | None:
        """Copy ``view`` into a free segment; its descriptor, or None when the pool is full.

        A full pool is back-pressure: wait up to ``wait_s`` for the receiver to release a segment that fits
        (it does as soon as it drops the arrays of an earlier message).
        """
        nbytes = view.nbytes
        deadline = time.monotonic() + wait_s
        while (segment := self._take(nbytes)) is None:
            fits_later = any(s.data_bytes >= nbytes for s in self.segments)
            if not fits_later or time.monotonic() >= deadline:
                return None
            time.sleep(0.001)
        segment.mapping[0] = IN_FLIGHT
        np.copyto(segment.data[:nbytes], np.frombuffer(view, np.uint8))
        return ("pooled", segment.path, segment.size, nbytes)

    def _take(self, nbytes: int) -> "_PooledSegment | None":
        free = [s for s in self.segments if s.free and s.data_bytes >= nbytes]
        if free:
            return min(free, key=lambda s: s.data_bytes)
        capacity = max(1 << (max(nbytes, 1) - 1).bit_length(), DEFAULT_THRESHOLD)  # next power of two
        if sum(s.size for s in self.segments) + capacity > self.max_bytes:
            return None
        segment = _PooledSegment(self.prefix, capacity)
        self.segments.append(segment)
        return segment

    def release(self, paths: set[str]) -> None:
        """Mark these segments free again (their message was never sent)."""
        for segment in self.segments:
            if segment.path in paths:
                segment.mapping[0] = FREE

    def close(self) -> None:
        for segment in self.segments:
            remove_segment(segment.path)  # still there if it was never sent
        self.segments.clear()


def write_one_off(prefix: str, view: memoryview) -> tuple:
    path, size, mapping = create_segment(prefix, view.nbytes)
    with mapping:
        np.copyto(np.frombuffer(mapping, np.uint8, view.nbytes, DATA_OFFSET), np.frombuffer(view, np.uint8))
    return ("one_off", path, size, view.nbytes)


class SharedArrays:
    """Arrays that live in shared memory from the start, so sending them copies nothing.

    ``empty(shape, dtype)`` gives a numpy array on a fresh segment; the channel sends any array whose memory lies
    in one of these segments by name and offset. The files are removed when this process closes the allocator
    (or exits), or by the cluster's sweep.
    """

    def __init__(self, prefix: str):
        self.prefix = prefix
        self._segments: list[tuple[int, int, str, int]] = []  # (start address, end address, path, size)
        self._mappings: list[mmap.mmap] = []

    def empty(self, shape, dtype=np.float32) -> np.ndarray:
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * dtype.itemsize
        path, size, mapping = create_segment(self.prefix, max(nbytes, 1))
        array = np.frombuffer(mapping, dtype, count, DATA_OFFSET).reshape(shape)
        start = _address(memoryview(mapping)[DATA_OFFSET:])
        self._segments.append((start, start + nbytes, path, size))
        self._mappings.append(mapping)
        return array

    def find(self, view: memoryview) -> tuple | None:
        """The descriptor of ``view`` if it lies inside one of these segments."""
        if not self._segments or not view.nbytes:
            return None
        address = _address(view)
        for start, end, path, size in self._segments:
            if start <= address and address + view.nbytes <= end:
                return ("shared", path, size, view.nbytes, DATA_OFFSET + address - start)
        return None

    def close(self) -> None:
        for _, _, path, _ in self._segments:
            remove_segment(path)
        self._segments.clear()
        self._mappings.clear()  # arrays still in use keep their own mappings alive


class ReceivedSegments:
    """A receiver's cached mappings; turns descriptors back into buffers without copying."""

    def __init__(self):
        self._mappings: dict[str, mmap.mmap] = {}

    def buffer(self, descriptor: tuple):
        kind = descriptor[0]
        if kind == "inline":
            return descriptor[1]
        _, path, size, nbytes, *rest = descriptor
        if kind == "one_off":
            mapping = map_segment(path, size, unlink=True)  # freed with the last array built on it
            return memoryview(mapping)[DATA_OFFSET:DATA_OFFSET + nbytes]
        mapping = self._mappings.get(path)
        if mapping is None:
            mapping = self._mappings[path] = map_segment(path, size, unlink=(kind == "pooled"))
        if kind == "shared":
            offset = rest[0]
            return np.frombuffer(mapping, np.uint8, nbytes, offset)
        holder = np.frombuffer(mapping, np.uint8, nbytes, DATA_OFFSET)
        weakref.finalize(holder, _mark_free, mapping)
        return holder

    def close(self) -> None:
        self._mappings.clear()  # mappings still used by arrays stay alive through those arrays


def _mark_free(mapping: mmap.mmap) -> None:
    if not mapping.closed:
        mapping[0] = FREE


def discard_one_off_segments(descriptors: list) -> None:
    """Remove the one-off segments of a message that was never sent."""
    for descriptor in descriptors:
        if descriptor[0] == "one_off":
            remove_segment(descriptor[1])
