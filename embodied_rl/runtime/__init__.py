"""The distributed runtime: it moves Python objects and tensors between named groups of processes.

It knows nothing about RL. ``Cluster`` starts or joins Ray, ``WorkerGroup`` runs ranks of a ``Worker`` class as
Ray actors, ``Channel`` carries keyed messages between them. ``DeviceLock`` lets components that share device
slots take turns; ``embodied_rl.runtime.offload.Offloader`` (not imported here: it imports torch) moves a
component's tensors off its device between turns.
"""

import importlib

_EXPORTS = {"Channel": "channel", "Cluster": "cluster", "DeviceLock": "device_lock", "DeviceLockError": "device_lock",
            "DeviceLockTimeout": "device_lock", "TurnRecord": "device_lock", "Worker": "worker",
            "WorkerGroup": "worker"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """The exports, imported on first use: ``embodied_rl.runtime.transports`` (encoding, CUDA IPC) is usable where
    Ray is not installed (the GPU checks' machines)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"embodied_rl.runtime.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
