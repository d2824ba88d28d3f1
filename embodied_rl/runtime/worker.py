"""Workers: ranks of one class running as Ray actors, addressed by group name and rank."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import ray


@dataclass(frozen=True)
class WorkerAddress:
    group: str
    rank: int

    def __str__(self) -> str:
        return f"{self.group}:{self.rank}"


class Worker:
    """Base class of every process-level role. Subclasses take their own keyword arguments after these."""

    def __init__(self, group: str, rank: int, world_size: int, torch_threads: int = 1,
                 cpu_slots: tuple[int, ...] | None = None, gpu_slots: tuple[int, ...] | None = None):
        if gpu_slots:
            # A GPU slot is a GPU of the node: this process sees only its own (set before CUDA initializes).
            os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices(gpu_slots, os.environ.get("CUDA_VISIBLE_DEVICES"))
        import torch

        if cpu_slots and hasattr(os, "sched_setaffinity"):
            # A CPU "device slot" is a core: pin this process so placement is real, not only bookkeeping.
            usable = os.sched_getaffinity(0)
            wanted = {slot for slot in cpu_slots if slot in usable}
            if wanted:
                os.sched_setaffinity(0, wanted)
                # More intra-op threads than pinned cores make them spin against each other: 2 threads on one
                # core ran a small MLP's PPO minibatches about 100x slower than 1 (2.47 s against 0.024 s).
                torch_threads = min(torch_threads, len(wanted))
        torch.set_num_threads(torch_threads)
        # Where this process computes: its first GPU when placed on GPU slots (and CUDA exists), else the CPU.
        self.device = torch.device("cuda", 0) if gpu_slots and torch.cuda.is_available() else torch.device("cpu")
        self.address = WorkerAddress(group, rank)
        self.rank = rank
        self.world_size = world_size
        self.collectives: dict = {}  # name -> CollectiveGroup this process belongs to (see collective.py)

    def ping(self) -> str:
        return str(self.address)

    def process_id(self) -> int:
        return os.getpid()

    def cpu_affinity(self) -> list[int]:
        return sorted(os.sched_getaffinity(0))

    def device_name(self) -> str:
        """Where this process computes: ``"cuda:0"`` (its own GPU) or ``"cpu"``."""
        return str(self.device)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def open_collective(self, name: str, world_size: int, backend: str = "auto", timeout_seconds: float = 600.0):
        """As rank 0 of collective ``name``: open its rendezvous here; returns the ``CollectiveSpec`` to join."""
        from embodied_rl.runtime import collective

        return collective.open_rendezvous(name, world_size, backend, timeout_seconds)

    def join_collective(self, spec, rank: int) -> None:
        """Join collective ``spec`` as ``rank`` (all ranks at once); the group is ``self.collectives[spec.name]``."""
        from embodied_rl.runtime import collective

        if spec.name in self.collectives:
            raise ValueError(f"{self.address} is already in a collective named {spec.name!r}")
        self.collectives[spec.name] = collective.join(spec, rank)

    def leave_collective(self, name: str) -> None:
        """Leave collective ``name`` and close its connections (no-op when not a member)."""
        group = self.collectives.pop(name, None)
        if group is not None:
            group.destroy()


def visible_devices(gpu_slots: tuple[int, ...], node_visible: str | None) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a process on ``gpu_slots``: slot i is the i-th GPU the node lets us use."""
    if not node_visible:
        return ",".join(str(slot) for slot in gpu_slots)
    node_devices = [d.strip() for d in node_visible.split(",") if d.strip()]
    missing = [slot for slot in gpu_slots if slot >= len(node_devices)]
    if missing:
        raise ValueError(f"GPU slots {missing} are out of range: this node exposes "
                         f"CUDA_VISIBLE_DEVICES={node_visible!r}")
    return ",".join(node_devices[slot] for slot in gpu_slots)


START_TIMEOUT_S = 300.0
"""How long a replacement or added worker may take to construct (a simulator or a model to build)."""


class WorkerGroup:
    """``num_workers`` Ray actors of ``worker_class``, ranks 0..n-1, each with ``cpus_per_worker`` CPU slots.

    ``call`` returns futures (one per rank) so groups can work at the same time; ``run`` waits for them.
    """

    def __init__(self, worker_class: type, name: str, num_workers: int, cpus_per_worker: float = 1.0,
                 node_ids: list[str] | None = None, **worker_kwargs: Any):
        if num_workers < 1:
            raise ValueError(f"worker group {name!r} needs at least one worker, got {num_workers}")
        self.name = name
        self.worker_class = worker_class
        self.cpus_per_worker = cpus_per_worker
        self.node_ids = node_ids
        self.worker_kwargs = worker_kwargs
        self.world_size = num_workers
        self._remote_class = ray.remote(worker_class)
        self.workers = [self._start(rank) for rank in range(num_workers)]
        # Wait until every rank has finished constructing (and subscribed to its channel keys), so the first
        # messages see all members; a constructor's exception surfaces here.
        ray.get([worker.ping.remote() for worker in self.workers])

    def _start(self, rank: int, **overrides: Any):
        options: dict[str, Any] = dict(num_cpus=self.cpus_per_worker, max_concurrency=1)
        if self.node_ids:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(self.node_ids[rank % len(self.node_ids)],
                                                                            soft=False)
        return self._remote_class.options(**options).remote(group=self.name, rank=rank, world_size=self.world_size,
                                                            **dict(self.worker_kwargs, **overrides))

    def replace(self, rank: int, **overrides: Any):
        """Kill rank ``rank`` (if still alive) and start a new worker in its place, built with the group's keyword
        arguments updated by ``overrides``; returns it once constructed."""
        ray.kill(self.workers[rank], no_restart=True)
        self.workers[rank] = self._start(rank, **overrides)
        self._wait_started([rank])
        return self.workers[rank]

    def resize(self, num_workers: int, cpus_per_new_worker: float | None = None, **overrides: Any) -> list[int]:
        """Grow to ``num_workers`` (new ranks built with the group's keyword arguments updated by ``overrides``,
        each declaring ``cpus_per_new_worker`` CPUs to Ray) or shrink by killing the highest ranks; returns the
        new ranks once constructed."""
        if num_workers < 1:
            raise ValueError(f"worker group {self.name!r} needs at least one worker, got {num_workers}")
        leaving = self.workers[num_workers:]
        if leaving and hasattr(self.worker_class, "leave"):
            ray.get([worker.leave.remote() for worker in leaving])  # e.g. stop being a reader of its channel keys
        for worker in leaving:
            ray.kill(worker, no_restart=True)
        del self.workers[num_workers:]
        self.world_size = num_workers
        self.worker_kwargs.update(overrides)
        if cpus_per_new_worker is not None:
            self.cpus_per_worker = cpus_per_new_worker
        added = list(range(len(self.workers), num_workers))
        self.workers.extend(self._start(rank) for rank in added)
        self._wait_started(added)
        return added

    def _wait_started(self, ranks: list[int]) -> None:
        """Wait for new ranks to finish constructing; a rank Ray cannot place fails after ``START_TIMEOUT_S``."""
        try:
            ray.get([self.workers[rank].ping.remote() for rank in ranks], timeout=START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(f"new {self.name} workers {ranks} did not start within {START_TIMEOUT_S:.0f} s "
                               f"(Ray could not place them: {ray.available_resources()} available)") from None

    def __len__(self) -> int:
        return len(self.workers)

    def call(self, method: str, *args, ranks: list[int] | None = None, **kwargs) -> list:
        targets = range(len(self.workers)) if ranks is None else ranks
        return [getattr(self.workers[r], method).remote(*args, **kwargs) for r in targets]

    def call_each(self, method: str, per_rank_args: list[tuple]) -> list:
        """Call ``method`` on rank i with ``*per_rank_args[i]``."""
        return [getattr(w, method).remote(*a) for w, a in zip(self.workers, per_rank_args)]

    def run(self, method: str, *args, **kwargs) -> list:
        return ray.get(self.call(method, *args, **kwargs))

    def kill(self) -> None:
        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        self.workers = []
