"""CUDA IPC: a CUDA tensor sent to a process on the same node travels as a handle to its device memory.

The receiver opens the sender's allocation (same GPU or a peer GPU of the node) without a copy; torch's
reference counting keeps the memory alive in the sender until every receiver has released it, so the sender
process must outlive the tensors it sent (it does: workers live for the whole run).
"""

from __future__ import annotations


def cuda_ipc_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def reduce_cuda_tensor(tensor):
    """A ``(rebuild function, arguments)`` pair for pickle that carries an IPC handle, not the bytes."""
    from torch.multiprocessing.reductions import reduce_tensor

    if not tensor.is_cuda:
        raise ValueError(f"CUDA IPC carries CUDA tensors only, got a tensor on {tensor.device}")
    return reduce_tensor(tensor.detach())
