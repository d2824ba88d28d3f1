"""The distributed runtime: it moves Python objects and tensors between named groups of processes.

It knows nothing about RL. ``Cluster`` starts or joins Ray, ``WorkerGroup`` runs ranks of a ``Worker`` class as
Ray actors, ``Channel`` carries keyed messages between them. ``DeviceLock`` lets components that share device
slots take turns; ``embodied_rl.runtime.offload.Offloader`` (not imported here: it imports torch) moves a
component's tensors off its device between turns.
"""

from embodied_rl.runtime.channel import Channel
from embodied_rl.runtime.cluster import Cluster
from embodied_rl.runtime.device_lock import DeviceLock, DeviceLockError, DeviceLockTimeout, TurnRecord
from embodied_rl.runtime.worker import Worker, WorkerGroup

__all__ = ["Channel", "Cluster", "DeviceLock", "DeviceLockError", "DeviceLockTimeout", "TurnRecord", "Worker",
           "WorkerGroup"]
