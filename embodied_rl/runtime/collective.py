"""Collectives: torch.distributed process groups among worker processes (NCCL across GPUs, gloo on CPU).

The tensor transport for weight broadcast (actor -> rollout workers) and point-to-point sends. A group is
formed from the driver over any list of ``Worker`` actor handles, which may come from different worker groups:

    spec = form_collective("weights", [actor.workers[0], *rollout.workers])   # ranks in list order
    # inside a worker:  self.collectives["weights"].broadcast_state_dict(state_dict, src=0)

How a group forms: rank 0 opens a rendezvous store (a ``TCPStore``) on its own node, on a port the kernel
picks, and returns a ``CollectiveSpec`` naming that address; then every rank joins at the same time.

Each group is its own backend object (``ProcessGroupGloo`` / ``ProcessGroupNCCL``) built on its own store,
never the process-wide default group of ``init_process_group``: that one exists once per process, so it would
clash with a trainer's own DDP group and keep a worker from belonging to two collectives at once.
"""

from __future__ import annotations

import datetime
import os
import pickle
import re
import socket
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.distributed as distributed

BACKENDS = ("auto", "nccl", "gloo")
DEFAULT_TIMEOUT_SECONDS = 600.0
_ALIGNMENT = 16  # bytes; every tensor in a packed buffer starts here so any dtype can view its slice
BUCKET_BYTES = 256 * 2 ** 20
"""About how many bytes of a state dict one broadcast carries (``broadcast_state_dict``)."""
_LAYER = re.compile(r"^(.*?\.(?:layers|h|blocks)\.\d+)\.")

# Rendezvous stores opened in this process (as rank 0) and not yet joined, by port.
_OPEN_STORES: dict[int, "distributed.TCPStore"] = {}


@dataclass(frozen=True)
class CollectiveSpec:
    """Everything a rank needs to join a group; picklable, made by ``open_rendezvous`` in rank 0's process.

    ``master_address:master_port`` is rank 0's rendezvous store; ``backend`` is ``"nccl"`` or ``"gloo"``;
    ``timeout_seconds`` bounds the rendezvous and every collective operation.
    """

    name: str
    world_size: int
    backend: str
    master_address: str
    master_port: int
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS


def resolve_backend(backend: str = "auto") -> str:
    """``auto`` is ``nccl`` where this process sees a GPU and torch has NCCL, else ``gloo``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; allowed: {', '.join(BACKENDS)}")
    if backend != "auto":
        return backend
    return "nccl" if torch.cuda.is_available() and distributed.is_nccl_available() else "gloo"


def open_rendezvous(name: str, world_size: int, backend: str = "auto",
                    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> CollectiveSpec:
    """Run in rank 0's process: start the group's rendezvous store and return the spec every rank joins with.

    The store listens on this node's Ray address (loopback for an embedded cluster) on a port the kernel
    chooses at bind time, so no other process can take the port between choosing and binding. The backend
    is resolved here too, where the ranks' devices are visible (the driver may have no GPU).
    """
    if world_size < 1:
        raise ValueError(f"collective {name!r} needs at least one rank, got world_size={world_size}")
    import ray

    backend = resolve_backend(backend)
    address = ray.util.get_node_ip_address()
    listener = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((address, 0))
    listener.listen(max(128, world_size))
    port = listener.getsockname()[1]
    # The store takes over the listening socket (and closes it when destroyed).
    _OPEN_STORES[port] = distributed.TCPStore(
        address, port, world_size, is_master=True, wait_for_workers=False,
        timeout=datetime.timedelta(seconds=timeout_seconds), master_listen_fd=listener.detach())
    return CollectiveSpec(name, world_size, backend, address, port, timeout_seconds)


def join(spec: CollectiveSpec, rank: int) -> "CollectiveGroup":
    """Run in every rank's process, all ranks at the same time: connect and return this rank's group.

    With NCCL each rank uses its current CUDA device (a Ray actor with ``num_gpus=1`` sees its one GPU as
    ``cuda:0``); two ranks must not share a GPU. Returns once every rank is connected (it ends in a barrier).
    """
    if not 0 <= rank < spec.world_size:
        raise ValueError(f"rank {rank} is outside collective {spec.name!r} of world size {spec.world_size}")
    timeout = datetime.timedelta(seconds=spec.timeout_seconds)
    store = _OPEN_STORES.pop(spec.master_port, None) if rank == 0 else None
    if store is None:
        store = distributed.TCPStore(spec.master_address, spec.master_port, spec.world_size, is_master=False,
                                     timeout=timeout)
    prefixed = distributed.PrefixStore(f"collective/{spec.name}", store)
    if spec.backend == "gloo":
        device = torch.device("cpu")
        backend = distributed.ProcessGroupGloo(prefixed, rank, spec.world_size, _gloo_options(spec, timeout))
    elif spec.backend == "nccl":
        if not torch.cuda.is_available() or not distributed.is_nccl_available():
            raise RuntimeError(f"collective {spec.name!r} uses NCCL, but rank {rank} has no CUDA device or "
                               f"this torch has no NCCL")
        device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        options = distributed.ProcessGroupNCCL.Options()
        options._timeout = timeout
        backend = distributed.ProcessGroupNCCL(prefixed, rank, spec.world_size, options)
    else:
        raise ValueError(f"backend={spec.backend!r}; a spec names nccl or gloo (resolve auto first)")
    group = CollectiveGroup(spec, rank, backend, store, device)
    group.barrier()  # NCCL connects lazily: make the first connection here, where a failure is expected
    return group


def _gloo_options(spec: CollectiveSpec, timeout: datetime.timedelta):
    """Gloo bound to the interface that carries the rendezvous address's traffic on this node.

    Without a device, gloo resolves the machine's host name, which on a multi-node cluster may name another
    interface than the one Ray uses (and on an embedded cluster one open to the network). ``GLOO_SOCKET_IFNAME``
    still wins where set.
    """
    import ray

    options = distributed.ProcessGroupGloo._Options()
    options._timeout = timeout
    interface = os.environ.get("GLOO_SOCKET_IFNAME")
    if interface:
        options._devices = [distributed.ProcessGroupGloo.create_device(interface=interface.split(",")[0])]
    else:
        options._devices = [distributed.ProcessGroupGloo.create_device(hostname=ray.util.get_node_ip_address())]
    return options


class CollectiveGroup:
    """This process's membership in one collective: rank ``rank`` of ``world_size``.

    Every operation is collective over the ranks it names: all ranks (or both ends of a send) must call it,
    in the same order. Tensors travel on ``device``: ``cuda`` for NCCL, ``cpu`` for gloo; tensors given on
    another device are copied there first.
    """

    def __init__(self, spec: CollectiveSpec, rank: int, backend, store, device: torch.device):
        self.spec = spec
        self.name = spec.name
        self.rank = rank
        self.world_size = spec.world_size
        self.device = device
        self._backend = backend
        self._store = store  # rank 0 serves the rendezvous store: keep it alive with the group

    def __repr__(self) -> str:
        return f"CollectiveGroup({self.name!r}, rank={self.rank}/{self.world_size}, backend={self.spec.backend})"

    # -- collectives ------------------------------------------------------------------------------------------

    def broadcast(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
        """Broadcast ``tensor`` (any shape, contiguous, on ``device``) from rank ``src`` into every rank's own."""
        self._check_rank(src)
        options = distributed.BroadcastOptions()
        options.rootRank = src
        self._backend.broadcast([tensor], options).wait()
        return tensor

    def broadcast_object(self, value=None, src: int = 0):
        """Broadcast a picklable Python object from ``src``; every rank returns it (others pass nothing)."""
        if self.rank == src:
            payload = torch.frombuffer(bytearray(pickle.dumps(value)), dtype=torch.uint8).to(self.device)
            length = torch.tensor([payload.numel()], dtype=torch.int64, device=self.device)
        else:
            length = torch.zeros(1, dtype=torch.int64, device=self.device)
        self.broadcast(length, src)
        if self.rank != src:
            payload = torch.empty(int(length.item()), dtype=torch.uint8, device=self.device)
        self.broadcast(payload, src)
        return value if self.rank == src else pickle.loads(payload.cpu().numpy().tobytes())

    def broadcast_state_dict(self, state_dict: dict[str, torch.Tensor] | None, src: int,
                             on_bucket: Callable[[dict[str, torch.Tensor]], None] | None = None,
                             bucket_bytes: int = BUCKET_BYTES) -> dict[str, torch.Tensor]:
        """Broadcast the tensors of ``state_dict`` from rank ``src`` to every rank (weight sync).

        ``src`` passes its state dict; the others pass ``None`` (they get new tensors on ``device``) or their own
        dict as a template (its tensors, on any device, are overwritten in place and returned, so a model that
        owns them is updated with no further copy; names, shapes and dtypes must match ``src``'s). A receiver
        without a template may pass ``on_bucket``: each bucket's tensors are handed to it as they arrive (e.g. into
        an inference engine) and nothing is kept (returns ``{}``).

        Receivers need not know names or shapes: a small metadata object (names, shapes, dtypes, the source's
        ``bucket_bytes``) goes first. Then the tensors travel packed as bytes in buckets of about ``bucket_bytes``
        (whole layers: the tensors of one ``layers.N`` block are never split), one broadcast per bucket: a model
        has hundreds of parameters, and one call per tensor pays the per-call latency (a rendezvous per call in
        NCCL, a round of messages in gloo) hundreds of times, while one buffer for the whole model would double
        its memory on every member. Packing as bytes, not one buffer per dtype, carries mixed dtypes in one call,
        also those a backend cannot reduce (bool, bfloat16 on gloo).
        """
        self._check_rank(src)
        if self.rank == src:
            if state_dict is None:
                raise ValueError(f"rank {src} is the source of the broadcast and must pass its state dict")
            tensors = {name: tensor.detach() for name, tensor in state_dict.items()}
            layout, bucket_bytes = self.broadcast_object(
                ([(name, tuple(t.shape), t.dtype) for name, t in tensors.items()], bucket_bytes), src)
        else:
            layout, bucket_bytes = self.broadcast_object(None, src)
            if state_dict is not None:
                _check_template(state_dict, layout, self.name)
        received = {}
        for bucket in bucketed(layout, bucket_bytes):
            offsets, total_bytes = _packed_offsets(bucket)
            buffer = torch.empty(total_bytes, dtype=torch.uint8, device=self.device)
            if self.rank == src:
                for (name, _, _), offset in zip(bucket, offsets):
                    flat = _as_bytes(tensors[name])
                    buffer[offset:offset + flat.numel()].copy_(flat)
            if total_bytes:
                self.broadcast(buffer, src)
            if self.rank == src:
                continue
            arrived = {}
            for (name, shape, dtype), offset in zip(bucket, offsets):
                size = torch.Size(shape).numel() * _itemsize(dtype)
                value = buffer[offset:offset + size].view(dtype).view(shape)
                if state_dict is not None:
                    with torch.no_grad():  # a template may hold a model's parameters, which require grad
                        arrived[name] = state_dict[name].copy_(value)
                else:
                    arrived[name] = value if on_bucket is not None else value.clone()  # own storage, not a view
            if on_bucket is not None:
                on_bucket(arrived)
            else:
                received.update(arrived)
        return dict(state_dict) if self.rank == src else received

    def send(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> None:
        """Send ``tensor`` to rank ``dst``, which must call ``recv`` with the same shape and dtype."""
        self._check_rank(dst)
        self._backend.send([tensor.detach().to(self.device).contiguous()], dst, tag).wait()

    def recv(self, like: torch.Tensor | Sequence[int], src: int, dtype: torch.dtype | None = None,
             tag: int = 0) -> torch.Tensor:
        """Receive a tensor sent by rank ``src``.

        ``like`` is either a tensor to receive into (overwritten in place and returned) or a shape, for which
        a new tensor of ``dtype`` (default float32) is made on ``device``.
        """
        self._check_rank(src)
        if isinstance(like, torch.Tensor):
            if dtype is not None and dtype != like.dtype:
                raise ValueError(f"recv into a {like.dtype} tensor with dtype={dtype}")
            direct = like.device == self.device and like.is_contiguous()
            target = like if direct else torch.empty(like.shape, dtype=like.dtype, device=self.device)
        else:
            target = torch.empty(tuple(like), dtype=dtype or torch.float32, device=self.device)
        self._backend.recv([target], src, tag).wait()
        if isinstance(like, torch.Tensor) and target is not like:
            like.copy_(target)
            return like
        return target

    def barrier(self) -> None:
        """Return once every rank has called ``barrier`` (an all-reduce of one number, waited for on the host)."""
        count = torch.ones(1, device=self.device)
        self._backend.allreduce([count]).wait()
        if int(count.item()) != self.world_size:
            raise RuntimeError(f"barrier of collective {self.name!r} counted {int(count.item())} ranks, "
                               f"expected {self.world_size}")

    def destroy(self) -> None:
        """Close this rank's connections (every rank should); the group is unusable afterwards."""
        if self._backend is None:
            return
        self._backend.shutdown()
        self._backend = None
        self._store = None

    def _check_rank(self, rank: int) -> None:
        if self._backend is None:
            raise RuntimeError(f"collective {self.name!r} was destroyed")
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside collective {self.name!r} of world size {self.world_size}")


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def bucketed(layout: list[tuple[str, tuple[int, ...], torch.dtype]], bucket_bytes: int) -> list[list]:
    """``layout`` (name, shape, dtype) in consecutive buckets of at most ``bucket_bytes`` packed, never splitting a
    layer (the entries of one ``...layers.N.`` / ``h.N.`` / ``blocks.N.`` prefix: an engine loads q/k/v or
    gate/up fused, so they travel together); a layer larger than the cap is a bucket of its own."""
    units: list[list] = []
    for entry in layout:
        match = _LAYER.match(entry[0])
        key = match.group(1) if match else entry[0]
        if units and units[-1][0] == key:
            units[-1][1].append(entry)
        else:
            units.append((key, [entry]))
    buckets, current, size = [], [], 0
    for _, entries in units:
        unit_size = _packed_offsets(entries)[1]
        if current and size + unit_size > bucket_bytes:
            buckets.append(current)
            current, size = [], 0
        current.extend(entries)
        size += unit_size
    if current or not buckets:
        buckets.append(current)
    return buckets


def _packed_offsets(layout: list[tuple[str, tuple[int, ...], torch.dtype]]) -> tuple[list[int], int]:
    """Byte offset of each tensor in the packed buffer (each aligned to ``_ALIGNMENT``) and the buffer's size."""
    offsets, position = [], 0
    for _, shape, dtype in layout:
        offsets.append(position)
        size = torch.Size(shape).numel() * _itemsize(dtype)
        position += -(-size // _ALIGNMENT) * _ALIGNMENT
    return offsets, position


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The bytes of ``tensor``, ``[numel * itemsize]`` uint8 (a view where it is contiguous)."""
    return tensor.contiguous().reshape(-1).view(torch.uint8)


def _check_template(template: dict[str, torch.Tensor], layout, name: str) -> None:
    mismatches = []
    for key, shape, dtype in layout:
        mine = template.get(key)
        if mine is None:
            mismatches.append(f"{key}: missing")
        elif tuple(mine.shape) != tuple(shape) or mine.dtype != dtype:
            mismatches.append(f"{key}: {tuple(mine.shape)} {mine.dtype}, sent {tuple(shape)} {dtype}")
    if mismatches:
        raise ValueError(f"collective {name!r}: the receive template does not match the sent state dict: "
                         + "; ".join(mismatches[:5]) + (" ..." if len(mismatches) > 5 else ""))


# -- driver side ----------------------------------------------------------------------------------------------

def form_collective(name: str, workers: list, backend: str = "auto",
                    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> CollectiveSpec:
    """From the driver: make ``workers`` (``Worker`` actor handles; rank = position in the list) one group.

    Each worker then holds its membership as ``self.collectives[name]``. Raises the first rank's error
    (a rank that cannot join leaves the others waiting up to ``timeout_seconds``).
    """
    import ray

    if not workers:
        raise ValueError(f"collective {name!r} needs at least one worker")
    spec = ray.get(workers[0].open_collective.remote(name, len(workers), backend, timeout_seconds))
    pending = [worker.join_collective.remote(spec, rank) for rank, worker in enumerate(workers)]
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        ray.get(ready)  # raises as soon as any rank fails, not after the ranks before it finish
    return spec


def dissolve_collective(name: str, workers: list) -> None:
    """From the driver: every worker of collective ``name`` leaves it and closes its connections."""
    import ray

    ray.get([worker.leave_collective.remote(name) for worker in workers])
