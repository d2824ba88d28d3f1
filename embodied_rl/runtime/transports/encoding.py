"""Messages to bytes and back, with array payloads kept out of the pickle.

Messages are pickled with protocol 5; every out-of-band buffer (numpy arrays, and torch CPU tensors, which are
reduced to numpy arrays here because torch's own pickling copies their bytes into the pickle) of at least the
threshold goes through shared memory (see ``shared_memory``); smaller ones ride inline. CUDA tensors sent to a
process on the same node travel as CUDA IPC handles (``cuda_ipc``); to another node they are copied to host
memory and rebuilt on the receiver's GPU if it has one.

When shared memory cannot hold a buffer (a full or small ``/dev/shm``), that buffer rides inline: the message
still goes, a warning is logged once per process and ``shared_memory_fallbacks`` counts it.

On a socket a message is one frame body (``pack_message``): ``[meta length: 8 bytes][meta pickle][inline
buffers...]``, where the meta pickle holds ``(channel, key, payload, descriptors)`` and inline descriptors carry
only their length; the inline bytes follow uncopied (the sender hands the arrays' own memory to ``sendmsg``)
and the receiver builds its arrays on the frame it received (``unpack_message``), again without a copy.
"""

from __future__ import annotations

import copyreg
import functools
import io
import logging
import pickle
import struct
import sys
from collections import defaultdict

from embodied_rl.runtime.transports import cuda_ipc, shared_memory
from embodied_rl.runtime.transports.shared_memory import (ReceivedSegments, SegmentPool, SharedArrays,
                                                         discard_one_off_segments, write_one_off)

log = logging.getLogger("embodied_rl.channel")


def _tensor_from_numpy(array, dtype_name: str, device: str):
    import torch

    tensor = torch.from_numpy(array)
    if dtype_name != str(tensor.dtype).removeprefix("torch."):
        tensor = tensor.view(getattr(torch, dtype_name))
    if device != "cpu":
        tensor = tensor.to(device if torch.cuda.is_available() else "cpu")
    return tensor


def _numpy_viewable(tensor):
    """``tensor`` as a numpy array sharing its memory (bfloat16 and friends travel as same-width integers)."""
    import torch

    tensor = tensor.detach().contiguous()
    try:
        return tensor.numpy()
    except TypeError:
        same_width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
        return tensor.view(same_width).numpy()


def _reduce_tensor(tensor, same_node: bool):
    dtype_name = str(tensor.dtype).removeprefix("torch.")
    if tensor.is_cuda:
        if same_node:
            return cuda_ipc.reduce_cuda_tensor(tensor)
        return _tensor_from_numpy, (_numpy_viewable(tensor.cpu()), dtype_name, "cuda")
    return _tensor_from_numpy, (_numpy_viewable(tensor), dtype_name, "cpu")


@functools.lru_cache(maxsize=2)
def _dispatch_table(same_node: bool) -> dict:
    """pickle's dispatch table plus our tensor reducer; built once per ``same_node``, not per message.

    The reducer is a partial, not a bound method of the pickler: a pickler in a reference cycle would keep its
    memo, and with it the arrays it pickled (and their shared-memory segments), alive until the cyclic GC runs.
    """
    import torch

    table = copyreg.dispatch_table.copy()
    table[torch.Tensor] = table[torch.nn.Parameter] = functools.partial(_reduce_tensor, same_node=same_node)
    return table


class _MessagePickler(pickle.Pickler):
    def __init__(self, file, buffer_callback, same_node: bool):
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)
        if "torch" in sys.modules:  # never import torch just to send plain numpy messages
            self.dispatch_table = _dispatch_table(same_node)


def dumps(obj, buffer_callback=None, same_node: bool = True) -> bytes:
    stream = io.BytesIO()
    pickler = _MessagePickler(stream, buffer_callback, same_node)
    pickler.dump(obj)
    pickler.clear_memo()
    return stream.getvalue()


class Encoder:
    """A sending process's encoder: a segment pool per receiving process, and its shared-array allocator.

    ``counters`` (shared with the outbox's traffic counters) gets ``shared_memory_fallbacks`` incremented for
    each buffer that shared memory could not hold and that went inline instead.
    """

    def __init__(self, segment_prefix: str, counters: dict | None = None):
        self.segment_prefix = segment_prefix
        self.shared_arrays = SharedArrays(segment_prefix)
        self.counters = defaultdict(int) if counters is None else counters
        self._pools: dict[object, SegmentPool] = {}
        self._warned: set = set()
        self._warned_no_space = False

    def encode(self, obj, receiver, threshold: int | None, same_node: bool,
               wait_s: float | None = None) -> tuple[bytes, list]:
        """``obj`` -> (pickle bytes, buffer descriptors). ``threshold=None``: every byte inline (no shared memory).

        Inline descriptors are ``("inline", memoryview)`` on the sender's own memory: send them before the
        object changes. ``wait_s`` bounds the wait for a full pool (default ``POOL_WAIT_S``).
        """
        buffers: list[pickle.PickleBuffer] = []
        payload = dumps(obj, buffers.append, same_node)
        descriptors = []
        pool_wait_s = shared_memory.POOL_WAIT_S if wait_s is None else min(wait_s, shared_memory.POOL_WAIT_S)
        for buffer in buffers:
            view = buffer.raw()
            if threshold is None or view.nbytes < threshold:
                descriptors.append(("inline", view))
                continue
            try:
                descriptor = self._to_shared_memory(view, receiver, pool_wait_s)
            except OSError as error:  # no room in shared memory: this buffer rides inline
                self._warn_no_space(error)
                self.counters["shared_memory_fallbacks"] += 1
                descriptor = ("inline", view)
            descriptors.append(descriptor)
        return payload, descriptors

    def _to_shared_memory(self, view: memoryview, receiver, wait_s: float) -> tuple:
        descriptor = self.shared_arrays.find(view)
        if descriptor is None:
            pool = self._pools.get(receiver)
            if pool is None:
                pool = self._pools[receiver] = SegmentPool(self.segment_prefix)
            descriptor = pool.write(view, wait_s)
            if descriptor is None:
                if receiver not in self._warned:
                    self._warned.add(receiver)
                    log.warning("shared memory pool for %s stayed full for %.0f s: sending one-off segments "
                                "(a reader that keeps received arrays should copy them)", receiver, wait_s)
                descriptor = write_one_off(self.segment_prefix, view)
        return descriptor

    def _warn_no_space(self, error: OSError) -> None:
        if not self._warned_no_space:
            self._warned_no_space = True
            directory = shared_memory.shm_dir()
            log.warning("shared memory at %s is full (%d bytes free: %s): sending such buffers inline on the "
                        "socket instead (slower; give the machine a larger %s)", directory,
                        shared_memory.free_bytes(directory), error, directory)

    def discard(self, receiver, descriptors: list) -> None:
        """Undo a send that failed: pooled segments back to free, one-off files removed."""
        pool = self._pools.get(receiver)
        if pool is not None:
            pool.release({d[1] for d in descriptors if d[0] == "pooled"})
        discard_one_off_segments(descriptors)

    def forget(self, receiver) -> None:
        pool = self._pools.pop(receiver, None)
        if pool is not None:
            pool.close()

    def close(self) -> None:
        for receiver in list(self._pools):
            self.forget(receiver)
        self.shared_arrays.close()


_LENGTH = struct.Struct("!Q")


def pack_message(channel: str, key: str, payload: bytes, descriptors: list) -> list:
    """A frame body as a list of bytes-like parts (inline buffers are not copied)."""
    wire = [("inline", d[1].nbytes) if d[0] == "inline" else d for d in descriptors]
    meta = pickle.dumps((channel, key, payload, wire), protocol=pickle.HIGHEST_PROTOCOL)
    return [_LENGTH.pack(len(meta)), meta, *(d[1] for d in descriptors if d[0] == "inline")]


def unpack_message(body: bytearray) -> tuple[str, str, bytes, list]:
    """``pack_message``'s parts, joined by the wire, back to ``(channel, key, payload, descriptors)``; inline
    descriptors become views of ``body`` (arrays built on them keep the frame alive)."""
    view = memoryview(body)
    (meta_length,) = _LENGTH.unpack_from(view)
    offset = _LENGTH.size + meta_length
    channel, key, payload, wire = pickle.loads(view[_LENGTH.size:offset])
    descriptors = []
    for descriptor in wire:
        if descriptor[0] == "inline":
            descriptors.append(("inline", view[offset:offset + descriptor[1]]))
            offset += descriptor[1]
        else:
            descriptors.append(descriptor)
    if offset != len(body):
        raise ValueError(f"a message frame of {len(body)} bytes describes {offset}")
    return channel, key, payload, descriptors


class Decoder:
    """A receiving process's decoder (caches the mappings of the segments it has seen)."""

    def __init__(self):
        self.segments = ReceivedSegments()

    def decode(self, payload: bytes, descriptors: list):
        return pickle.loads(payload, buffers=[self.segments.buffer(d) for d in descriptors])

    def close(self) -> None:
        """Drop the cached mappings (arrays already built keep theirs)."""
        self.segments.close()
