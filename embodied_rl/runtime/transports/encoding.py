"""Messages to bytes and back, with array payloads kept out of the pickle.

Messages are pickled with protocol 5; every out-of-band buffer (numpy arrays, and torch CPU tensors, which are
reduced to numpy arrays here because torch's own pickling copies their bytes into the pickle) of at least the
threshold goes through shared memory (see ``shared_memory``); smaller ones ride inline. CUDA tensors sent to a
process on the same node travel as CUDA IPC handles (``cuda_ipc``); to another node they are copied to host
memory and rebuilt on the receiver's GPU if it has one.
"""

from __future__ import annotations

import copyreg
import functools
import io
import logging
import pickle
import sys

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
    """A sending process's encoder: a segment pool per receiving process, and its shared-array allocator."""

    def __init__(self, segment_prefix: str):
        self.segment_prefix = segment_prefix
        self.shared_arrays = SharedArrays(segment_prefix)
        self._pools: dict[object, SegmentPool] = {}
        self._warned: set = set()

    def encode(self, obj, receiver, threshold: int | None, same_node: bool) -> tuple[bytes, list]:
        """``obj`` -> (pickle bytes, buffer descriptors). ``threshold=None``: every byte inline (no shared memory)."""
        buffers: list[pickle.PickleBuffer] = []
        payload = dumps(obj, buffers.append, same_node)
        descriptors = []
        for buffer in buffers:
            view = buffer.raw()
            if threshold is None or view.nbytes < threshold:
                descriptors.append(("inline", bytes(view)))
                continue
            descriptor = self.shared_arrays.find(view)
            if descriptor is None:
                pool = self._pools.get(receiver)
                if pool is None:
                    pool = self._pools[receiver] = SegmentPool(self.segment_prefix)
                descriptor = pool.write(view, shared_memory.POOL_WAIT_S)
                if descriptor is None:
                    if receiver not in self._warned:
                        self._warned.add(receiver)
                        log.warning("shared memory pool for %s stayed full for %.0f s: sending one-off segments "
                                    "(a reader that keeps received arrays should copy them)", receiver,
                                    shared_memory.POOL_WAIT_S)
                    descriptor = write_one_off(self.segment_prefix, view)
            descriptors.append(descriptor)
        return payload, descriptors

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


class Decoder:
    """A receiving process's decoder (caches the mappings of the segments it has seen)."""

    def __init__(self):
        self.segments = ReceivedSegments()

    def decode(self, payload: bytes, descriptors: list):
        return pickle.loads(payload, buffers=[self.segments.buffer(d) for d in descriptors])
