"""Workers: ranks of one class running as Ray actors, addressed by group name and rank."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import ray

from embodied_rl.runtime.deadlines import WorkerStartError


@dataclass(frozen=True)
class WorkerAddress:
    group: str
    rank: int

    def __str__(self) -> str:
        return f"{self.group}:{self.rank}"


class Worker:
    """Base class of every process-level role. Subclasses take their own keyword arguments after these.

    ``CONCURRENCY_GROUPS``: Ray concurrency groups of the subclass (``{"heartbeat": 1}`` lets a method marked
    ``@ray.method(concurrency_group="heartbeat")`` answer from a thread of its own while another method runs; every
    other method still runs one at a time, in one thread)."""

    CONCURRENCY_GROUPS: dict[str, int] = {}

    @classmethod
    def prepare_process(cls, **worker_kwargs) -> None:
        """In a standby process (see ``WorkerGroup``'s ``standby``), ahead of any rank: the slow part of starting that
        does not depend on the rank, e.g. importing big modules. Gets the group's keyword arguments as they are."""
        import torch  # noqa: F401  (every worker's constructor imports it)

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


START_TIMEOUT_S = 600.0
"""How long a worker may take to construct (a simulator or a model to build) before its start fails; runs pass
``fault.start_timeout_s``."""


def _resources(resources: dict) -> dict:
    """Ray's resources without its per-node and bookkeeping entries (``node:...``, object store memory)."""
    return {k: round(v, 2) for k, v in sorted(resources.items())
            if not k.startswith("node:") and k not in ("object_store_memory", "memory")}


def _cause(error) -> str:
    """The last ``Type: message`` line of a worker's error (a constructor's exception inside Ray's report)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    raised = [line for line in lines if ": " in line and line.split(":", 1)[0].replace(".", "").isidentifier()
              and line.split(":", 1)[0].endswith(("Error", "Exception", "Exit", "Interrupt"))]
    if not raised:
        return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]
    name, _, message = raised[-1].partition(": ")
    return f"{name.rsplit('.', 1)[-1]}: {message}"[:300]  # the class name, without its module


@dataclass
class Growth:
    """A resize under way (``WorkerGroup.begin_resize``): the ranks it started and what the group was before."""

    added: list
    before: tuple
    done: bool = False


def _standby_class(worker_class: type) -> type:
    """``worker_class`` with a constructor that only prepares the process (``prepare_process``); ``construct`` runs
    the real constructor later, with a rank's arguments. Named like the class (Ray titles its process alike)."""

    class Standby(worker_class):
        def __init__(self, **worker_kwargs):  # noqa: D107 - no super().__init__: ``construct`` runs it
            worker_class.prepare_process(**worker_kwargs)

        def construct(self, **worker_kwargs) -> str:
            worker_class.__init__(self, **worker_kwargs)
            return self.ping()

    Standby.__name__ = Standby.__qualname__ = worker_class.__name__
    return Standby


def _ray_class(worker_class: type, standby: bool = False):
    """``worker_class`` as a Ray actor class with its ``CONCURRENCY_GROUPS`` (``standby``: its ``_standby_class``)."""
    groups = getattr(worker_class, "CONCURRENCY_GROUPS", None)
    remote = ray.remote(concurrency_groups=groups) if groups else ray.remote
    return remote(_standby_class(worker_class) if standby else worker_class)


def _rank_options(cpus_per_worker: float, node_ids: list[str] | None, rank: int) -> dict[str, Any]:
    """Ray actor options of a group's rank: its CPU slots and, with ``node_ids``, its node."""
    options: dict[str, Any] = dict(num_cpus=cpus_per_worker, max_concurrency=1)
    if node_ids:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_ids[rank % len(node_ids)], soft=False)
    return options


class Prestarted:
    """A group's processes started before its constructor arguments are known (``WorkerGroup(prestarted=...)``):
    each holds its rank's resources and has imported the worker's modules (``prepare_process``), so the start-up
    of one group overlaps what another group's arguments wait for (e.g. the rollout and actor processes start
    while the env workers build the simulators that give the policy its shapes)."""

    def __init__(self, worker_class: type, num_workers: int, cpus_per_worker: float = 1.0,
                 node_ids: list[str] | None = None):
        self.worker_class, self.cpus_per_worker, self.node_ids = worker_class, cpus_per_worker, node_ids
        standby_class = _ray_class(worker_class, standby=True)
        self.processes = [standby_class.options(**_rank_options(cpus_per_worker, node_ids, rank)).remote()
                          for rank in range(num_workers)]

    def check(self, worker_class: type, num_workers: int, cpus_per_worker: float, node_ids) -> None:
        if (worker_class, num_workers, cpus_per_worker, node_ids) != \
                (self.worker_class, len(self.processes), self.cpus_per_worker, self.node_ids):
            raise ValueError(f"prestarted {len(self.processes)} x {self.worker_class.__name__} "
                             f"({self.cpus_per_worker} CPUs, nodes {self.node_ids}) do not fit a group of "
                             f"{num_workers} x {worker_class.__name__} ({cpus_per_worker} CPUs, nodes {node_ids})")

    def kill(self) -> None:
        for process in self.processes:
            ray.kill(process, no_restart=True)


class WorkerGroup:
    """``num_workers`` Ray actors of ``worker_class``, ranks 0..n-1, each with ``cpus_per_worker`` CPU slots.

    ``call`` returns futures (one per rank) so groups can work at the same time; ``run`` waits for them.

    ``standby``: processes kept started beside the group (Ray actors of the class, declaring no CPUs, that ran
    ``prepare_process`` and constructed nothing); a worker added or replaced later is constructed in one of them
    (skipping process start-up and module imports), and another is started for the next time. Not with
    ``node_ids`` (a standby process is not on a chosen node). ``prestarted``: the ranks' processes, already started
    (``Prestarted``), in which the ranks are constructed.
    """

    def __init__(self, worker_class: type, name: str, num_workers: int, cpus_per_worker: float = 1.0,
                 node_ids: list[str] | None = None, start_timeout_s: float = START_TIMEOUT_S, standby: int = 0,
                 prestarted: "Prestarted | None" = None, **worker_kwargs: Any):
        if num_workers < 1:
            raise ValueError(f"worker group {name!r} needs at least one worker, got {num_workers}")
        self.name = name
        self.worker_class = worker_class
        self.cpus_per_worker = cpus_per_worker
        self.node_ids = node_ids
        self.start_timeout_s = start_timeout_s
        self.worker_kwargs = worker_kwargs
        self.world_size = num_workers
        self._remote_class = _ray_class(worker_class)
        self.standby = 0 if node_ids else standby
        self._standby_class = _ray_class(worker_class, standby=True) if self.standby else None
        self._standby: list = []  # started standby processes, oldest first
        self._constructing: dict[int, Any] = {}  # rank -> reference of ``construct`` in a standby process
        if prestarted is not None:
            prestarted.check(worker_class, num_workers, cpus_per_worker, self.node_ids)
            self.workers = list(prestarted.processes)
            for rank, worker in enumerate(self.workers):
                self._constructing[rank] = worker.construct.remote(**self._rank_kwargs(rank))
        else:
            self.workers = [self._start(rank) for rank in range(num_workers)]
        # Wait until every rank has finished constructing (and subscribed to its channel keys), so the first
        # messages see all members; a constructor's exception, or a worker Ray cannot place, fails here.
        try:
            self._wait_started(list(range(num_workers)))
        except WorkerStartError:
            self.kill()
            raise
        self._refill_standby()

    def _rank_kwargs(self, rank: int, **overrides: Any) -> dict:
        return dict(group=self.name, rank=rank, world_size=self.world_size, **dict(self.worker_kwargs, **overrides))

    def _start(self, rank: int, **overrides: Any):
        kwargs = self._rank_kwargs(rank, **overrides)
        if self._standby:
            worker = self._standby.pop(0)
            self._constructing[rank] = worker.construct.remote(**kwargs)
            return worker
        return self._remote_class.options(**_rank_options(self.cpus_per_worker, self.node_ids, rank)).remote(**kwargs)

    def wait_standby(self, timeout_s: float | None = None) -> None:
        """Wait until the standby processes have prepared (e.g. before measuring something they would slow)."""
        if self._standby:
            ray.wait([worker.__ray_ready__.remote() for worker in self._standby], num_returns=len(self._standby),
                     timeout=self.start_timeout_s if timeout_s is None else timeout_s)

    def _refill_standby(self) -> None:
        """Start standby processes up to ``standby`` (without waiting for them)."""
        while len(self._standby) < self.standby:
            self._standby.append(self._standby_class.options(num_cpus=0, max_concurrency=1).remote(
                **self.worker_kwargs))

    def replace(self, rank: int, **overrides: Any):
        """Kill rank ``rank`` (if still alive) and start a new worker in its place, built with the group's keyword
        arguments updated by ``overrides``; returns it once constructed (``WorkerStartError`` if it does not
        construct within the start deadline)."""
        ray.kill(self.workers[rank], no_restart=True)
        self.workers[rank] = self._start(rank, **overrides)
        self._wait_started([rank])
        self._refill_standby()
        return self.workers[rank]

    def resize(self, num_workers: int, cpus_per_new_worker: float | None = None, **overrides: Any) -> list[int]:
        """Grow to ``num_workers`` (new ranks built with the group's keyword arguments updated by ``overrides``,
        each declaring ``cpus_per_new_worker`` CPUs to Ray) or shrink by killing the highest ranks; returns the
        new ranks once constructed. A growth whose new workers do not all construct within the start deadline is
        undone (they are killed; size, keyword arguments and CPUs stay as they were) and raises
        ``WorkerStartError``."""
        return self.finish_resize(self.begin_resize(num_workers, cpus_per_new_worker, **overrides))

    def begin_resize(self, num_workers: int, cpus_per_new_worker: float | None = None,
                     **overrides: Any) -> "Growth":
        """The first half of ``resize``: shrink at once, or start the new ranks without waiting for them (other
        work, e.g. another group's growth, proceeds while they construct); ``finish_resize`` waits."""
        if num_workers < 1:
            raise ValueError(f"worker group {self.name!r} needs at least one worker, got {num_workers}")
        leaving = self.workers[num_workers:]
        if leaving and hasattr(self.worker_class, "leave"):
            # e.g. stop being a reader of its channel keys; a worker that does not answer is killed all the same
            finished, _ = ray.wait([worker.leave.remote() for worker in leaving], num_returns=len(leaving),
                                   timeout=self.start_timeout_s)
            for ref in finished:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError:
                    pass  # already dead: nothing to leave
        for worker in leaving:
            ray.kill(worker, no_restart=True)
        del self.workers[num_workers:]
        growth = Growth(list(range(len(self.workers), num_workers)),
                        (self.world_size, dict(self.worker_kwargs), self.cpus_per_worker))
        self.world_size = num_workers
        self.worker_kwargs.update(overrides)
        if cpus_per_new_worker is not None:
            self.cpus_per_worker = cpus_per_new_worker
        self.workers.extend(self._start(rank) for rank in growth.added)
        growth.done = not growth.added  # a shrink is complete (and cannot be undone)
        return growth

    def finish_resize(self, growth: "Growth") -> list[int]:
        """Wait for the ranks ``begin_resize`` started; on ``WorkerStartError`` the growth is undone first."""
        try:
            self._wait_started(growth.added)
        except WorkerStartError:
            self.abort_resize(growth)
            raise
        growth.done = True
        self._refill_standby()
        return growth.added

    def abort_resize(self, growth: "Growth") -> None:
        """Undo a growth not finished: kill its new ranks and restore size, keyword arguments and CPUs."""
        if growth.done:
            return
        for rank in growth.added:
            ray.kill(self.workers[rank], no_restart=True)
        del self.workers[len(self.workers) - len(growth.added):]
        self.world_size, self.worker_kwargs, self.cpus_per_worker = growth.before
        growth.done = True

    def _wait_started(self, ranks: list[int]) -> None:
        """Wait until ``ranks`` (just started) have constructed: ``WorkerStartError`` naming the group, the ranks
        and the resources Ray had when one raised in its constructor or was not constructed within
        ``start_timeout_s`` (a worker Ray cannot place waits for resources that never come)."""
        if not ranks:
            return
        pings = {self._constructing.pop(rank, None) or self.workers[rank].ping.remote(): rank for rank in ranks}
        finished, pending = ray.wait(list(pings), num_returns=len(pings), timeout=self.start_timeout_s)
        for ref in finished:
            try:
                ray.get(ref)
            except ray.exceptions.RayError as error:
                raise WorkerStartError(f"worker group {self.name!r}: rank {pings[ref]} failed to start: "
                                       f"{_cause(error)}") from None
        if pending:
            late = sorted(pings[ref] for ref in pending)
            asked = {"CPU": self.cpus_per_worker, **({"node": self.node_ids} if self.node_ids else {})}
            raise WorkerStartError(
                f"worker group {self.name!r}: ranks {late} did not start within {self.start_timeout_s:g} s "
                f"(fault.start_timeout_s); each asks Ray for {asked}, Ray had "
                f"{_resources(ray.available_resources())} available of {_resources(ray.cluster_resources())}")

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
        for worker in self.workers + self._standby:
            ray.kill(worker, no_restart=True)
        self.workers, self._standby = [], []
