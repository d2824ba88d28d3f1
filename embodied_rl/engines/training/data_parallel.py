"""Data-parallel training of one model over a torch.distributed process group: ``single`` (one process, no group),
``ddp`` (``DistributedDataParallel``: every rank holds the whole model, gradients are all-reduced) or ``fsdp``
(FSDP2 ``fully_shard``: parameters, gradients and optimizer state are sharded across ranks). gloo on CPU, NCCL on
GPU. The group is torch's default process group, so a trainer process belongs to one such engine.

How a trainer uses it (every rank runs the same code on the same full batch, at the same time):

    engine = DataParallelEngine(model, DataParallelConfig("fsdp", rank, world_size, address, port), device)
    optimizer = torch.optim.AdamW(engine.model.parameters())      # after wrapping: FSDP swaps in sharded params
    part = engine.shard(minibatch_rows)                           # this rank's contiguous slice
    loss = local_loss * engine.loss_scale(local_denominator, global_denominator)
    loss.backward(); engine.clip_grad_norm_(1.0); optimizer.step()
    weights = engine.full_state_dict()                            # rank 0: the whole model; others: None

Loss normalisation. Every rank computes the loss of its own slice with the algorithm's aggregation, i.e.
``local_numerator / local_denominator`` (token-mean: the slice's token count; a sequence mean: its row count;
Dr.GRPO's sum-norm: its padded width). DDP and FSDP both *average* gradients over ranks, so the single-process
gradient of the whole minibatch, ``sum_r local_numerator_r / global_denominator``, comes out when each rank scales
its loss by ``world_size * local_denominator / global_denominator`` (``loss_scale``). The global denominator is the
aggregation's denominator over the whole minibatch (sum of the counts; for a padded width, the largest width). A
plain per-rank mean would weight a rank's tokens by ``1 / (world_size * local_count)`` instead: wrong whenever the
slices hold different numbers of tokens.

Collectives: ``DataParallelEngine(...)``, every forward and backward of ``module`` under FSDP, ``full_state_dict``,
``full_module``, ``frozen_copy``, ``optimizer_state_dict``, ``all_reduce_sum``, ``all_gather_rows`` and
``broadcast_object`` must be called by every rank, the
same number of times, in the same order. A rank with nothing to train in a minibatch still runs a forward and
backward (e.g. on one row of the minibatch with ``loss_scale`` 0), or the others wait for it forever.
"""

from __future__ import annotations

import copy
import datetime
import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist

BACKENDS = ("single", "ddp", "fsdp")


@dataclass(frozen=True)
class DataParallelConfig:
    backend: str = "single"
    """single (one process), ddp (replicated model) or fsdp (FSDP2, sharded model and optimizer state)."""
    rank: int = 0
    world_size: int = 1
    master_address: str = "127.0.0.1"
    """Where rank 0 listens for the rendezvous (its own node's address)."""
    master_port: int = 29500
    served_store: bool = False
    """False: rank 0 serves the rendezvous store on ``master_port`` (which must still be free). True: another
    process serves it there (``serve_rendezvous``, race-free) and every rank joins it as a client."""
    timeout_s: float = 600.0
    """Bounds the rendezvous and every collective: a dead rank fails the others after this long, never hangs them."""

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"data_parallel.backend={self.backend!r}; allowed: {', '.join(BACKENDS)}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"data_parallel.rank={self.rank} must be in [0, world_size={self.world_size})")
        if self.backend == "single" and self.world_size != 1:
            raise ValueError(f"data_parallel.backend='single' needs world_size=1, got {self.world_size}")


def serve_rendezvous(address: str = "127.0.0.1", timeout_s: float = 600.0) -> dist.TCPStore:
    """A rendezvous store served by this process on a port the OS picks as it binds (``store.port``), for ranks
    started elsewhere (``DataParallelConfig(master_port=store.port, served_store=True)``). A port probed free and
    handed to rank 0 to bind later can be taken in between; this one cannot. Keep the store alive while the ranks
    run; one store per group."""
    return dist.TCPStore(address, 0, is_master=True, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=timeout_s))


def barrier_before_leaving() -> None:
    """A barrier over the default process group just before it is destroyed (``DataParallelEngine.close`` says why).
    A peer that is gone fails it (at once when its connection closed, else after the group's timeout); the caller
    then leaves all the same, with a warning naming the error."""
    try:
        dist.barrier()
    except RuntimeError as error:  # torch's DistBackendError is one
        warnings.warn(f"leaving the process group without the other ranks: {str(error).splitlines()[0]}")


class DataParallelEngine:
    """``model`` (built identically on every rank) wrapped for data-parallel training on ``device``.

    ``module`` is what training forwards go through (the DDP wrapper; under FSDP the sharded model itself);
    ``model`` is the underlying module (under FSDP the same sharded object), for optimizers and no-grad forwards.
    """

    def __init__(self, model: torch.nn.Module, config: DataParallelConfig, device: torch.device,
                 forward_methods: tuple[str, ...] = ()):
        self.config = config
        self.forward_methods = tuple(m for m in forward_methods if hasattr(model, m))
        self.rank, self.world_size = config.rank, config.world_size
        self.backend = config.backend
        self.device = device
        self.model = model
        self.module = model
        self._owns_group = False
        self._skeleton = None
        if self.backend == "single":
            return
        self._join_group()
        if self.backend == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            # Broadcasts rank 0's parameters and buffers here, so all ranks start from the same weights.
            self.module = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
        else:
            self._skeleton = _meta_skeleton(model)
            with torch.no_grad():  # fully_shard keeps each rank's slice of its own copy: make the copies one
                for tensor in [*model.parameters(), *model.buffers()]:
                    dist.broadcast(tensor, src=0)
            self._mesh = _mesh(device, self.world_size)
            _shard(model, self._mesh, self.forward_methods)

    @property
    def distributed(self) -> bool:
        return self.backend != "single"

    def _join_group(self) -> None:
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        if dist.is_initialized():
            if (dist.get_rank(), dist.get_world_size()) != (self.rank, self.world_size):
                raise RuntimeError(f"this process is already rank {dist.get_rank()} of "
                                   f"{dist.get_world_size()} in torch's default process group, not rank "
                                   f"{self.rank} of {self.world_size}")
            return
        timeout = datetime.timedelta(seconds=self.config.timeout_s)
        options = dict(device_id=self.device) if backend == "nccl" else {}
        if self.config.served_store:
            options["store"] = dist.TCPStore(self.config.master_address, self.config.master_port, self.world_size,
                                             is_master=False, timeout=timeout)
        else:
            options["init_method"] = f"tcp://{self.config.master_address}:{self.config.master_port}"
        dist.init_process_group(backend, rank=self.rank, world_size=self.world_size, timeout=timeout, **options)
        self._owns_group = True

    def optimized_parameters(self) -> list[torch.nn.Parameter]:
        """The tensors to hand the optimizer (after wrapping: FSDP swaps in sharded ones): the trainable ones."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def after_step(self) -> None:
        """Nothing to do after an optimizer step (the interface ``MegatronLlamaEngine`` fills for its masters)."""

    def shard(self, items: list) -> list:
        """This rank's contiguous slice of ``items`` (the same list on every rank): ``len(items) // world_size``
        items each, the first ``len(items) % world_size`` ranks one more. May be empty."""
        size, extra = divmod(len(items), self.world_size)
        start = self.rank * size + min(self.rank, extra)
        return items[start:start + size + (self.rank < extra)]

    def loss_scale(self, local_denominator: float, global_denominator: float) -> float:
        """The factor on this rank's loss (its slice's aggregate) that makes the averaged gradient the gradient of
        the whole minibatch's aggregate: ``world_size * local_denominator / global_denominator`` (module doc)."""
        return self.world_size * float(local_denominator) / float(global_denominator)

    def clip_grad_norm_(self, max_norm: float) -> float:
        """Clip the gradients to a global L2 norm of ``max_norm``; returns the norm before clipping. Under FSDP the
        gradients are sharded DTensors and ``clip_grad_norm_`` reduces their norm across ranks."""
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        return float(norm)

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over ranks (the same length on each); one collective."""
        if not self.distributed:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def row_counts(self, rows: int) -> list[int]:
        """How many of ``rows`` items ``shard`` gives each rank (rank order)."""
        size, extra = divmod(rows, self.world_size)
        return [size + (rank < extra) for rank in range(self.world_size)]

    def all_gather_rows(self, local: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """Every rank's ``local`` rows (``[counts[rank], ...]``, the same trailing shape on each) concatenated in
        rank order: ``[sum(counts), ...]`` on every rank. One collective (rows padded to the largest count)."""
        if not self.distributed:
            return local
        width = max(counts)
        padded = local.new_zeros((width, *local.shape[1:]))
        padded[:len(local)] = local
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(parts, padded.contiguous())
        return torch.cat([part[:count] for part, count in zip(parts, counts)])

    def broadcast_object(self, value=None):
        """Rank 0's ``value`` (any picklable object) on every rank."""
        if not self.distributed:
            return value
        box = [value if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0, device=self.device if self.device.type == "cuda" else None)
        return box[0]

    def check_same(self, value: int, what: str) -> None:
        """Raise on every rank unless every rank holds the same integer ``value`` (e.g. a seed)."""
        if not self.distributed:
            return
        bounds = torch.tensor([-value, value], dtype=torch.int64, device=self.device)
        dist.all_reduce(bounds, op=dist.ReduceOp.MAX)  # [-min, max] over ranks
        low, high = -bounds[0].item(), bounds[1].item()
        if low != high:
            raise ValueError(f"{what} differs across data-parallel ranks (from {low} to {high}); every rank must "
                             f"be given the same")

    def full_state_dict(self, module: torch.nn.Module | None = None,
                        names: set[str] | None = None) -> dict[str, torch.Tensor] | None:
        """The whole model's state dict on rank 0 (the live tensors under single/DDP, CPU copies under FSDP), None
        on the others. Same keys as the unwrapped model's ``state_dict()``. ``module``: another module wrapped
        like the model (a ``frozen_copy``) instead of the model. ``names``: only these entries (under FSDP only
        they are gathered: a sync of LoRA adapters does not move the frozen base)."""
        module = self.model if module is None else module
        if names is not None:
            state = module.state_dict()
            if self.backend != "fsdp":
                return {k: v for k, v in state.items() if k in names} if self.rank == 0 else None
            gathered = {}
            for name, value in state.items():  # the same order on every rank: one all-gather per sharded entry
                if name in names:
                    value = value.full_tensor() if hasattr(value, "full_tensor") else value
                    if self.rank == 0:
                        gathered[name] = value.detach().cpu()
            return gathered if self.rank == 0 else None
        if self.backend == "fsdp":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            # cpu_offload: gathered layer by layer into rank 0's host memory; the other ranks get {}.
            full = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            return full if self.rank == 0 else None
        return module.state_dict() if self.rank == 0 else None

    def load_full_state_dict(self, state: dict[str, torch.Tensor], module: torch.nn.Module | None = None) -> None:
        """On every rank, the same whole-model ``state`` (``full_state_dict``'s keys) into the model, or into
        ``module`` (a ``frozen_copy``); under FSDP each rank keeps its own shards of it."""
        module = self.model if module is None else module
        if self.backend == "fsdp":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

            set_model_state_dict(module, state, options=StateDictOptions(full_state_dict=True))
        else:
            module.load_state_dict(state)

    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """On every rank, the same ``optimizer_state_dict`` (from rank 0 of a run with this backend) into
        ``optimizer``; under FSDP each rank keeps its own shards of it."""
        if self.backend == "fsdp":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

            # strict=False: a parameter no loss has reached yet (GRPO's unused critic) has no Adam state to load
            set_optimizer_state_dict(self.model, optimizer, state,
                                     options=StateDictOptions(full_state_dict=True, strict=False))
        else:
            optimizer.load_state_dict(state)

    def full_module(self) -> torch.nn.Module | None:
        """On rank 0, an unsharded module holding the whole model (to save in a library's own format): the live
        model under single/DDP, a fresh CPU copy under FSDP; None on the others."""
        state = self.full_state_dict()
        if self.backend != "fsdp" or state is None:
            return self.model if state is not None else None
        module = _materialize(copy.deepcopy(self._skeleton), torch.device("cpu"), self.model)
        module.load_state_dict(state)
        return module

    def frozen_copy(self) -> torch.nn.Module:
        """A copy of the model as it is now, in eval mode and without gradients, for no-grad forwards (a KL
        reference): a local deep copy under single/DDP, a model sharded like this one under FSDP."""
        if self.backend != "fsdp":
            frozen = copy.deepcopy(self.model).eval()
        else:  # FSDP modules refuse deepcopy: shard a fresh skeleton the same way and copy the local shards
            frozen = copy.deepcopy(self._skeleton)
            _shard(frozen, self._mesh, self.forward_methods)
            _materialize(frozen, self.device, self.model)
            _reshard(self.model)  # the root stays gathered after a forward; its parameters must be shards here
            live = dict(self.model.named_parameters())
            with torch.no_grad():
                for name, param in frozen.named_parameters():
                    param.to_local().copy_(live[name].to_local())
            frozen.eval()
        return frozen.requires_grad_(False)

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict | None:
        """On rank 0, the optimizer's whole state: ``optimizer.state_dict()`` under single/DDP; under FSDP the
        gathered full state keyed by parameter name (``torch.distributed.checkpoint`` layout). None elsewhere."""
        if self.backend == "fsdp":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

            full = get_optimizer_state_dict(self.model, optimizer,
                                            options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            return full if self.rank == 0 else None
        return optimizer.state_dict() if self.rank == 0 else None

    def close(self) -> None:
        """Leave the process group (if this engine made it); every rank calls it (a barrier), after which the
        engine trains no more.

        Why the barrier, and why the DDP wrapper goes here: gloo's worker threads free each finished collective's
        tensors themselves, and a tensor whose Python object outlived Python's last reference needs the GIL to be
        freed. The group's destructor joins those threads while holding the GIL, so a thread still freeing the last
        collective's tensors when it runs deadlocks the process (seen: a rank hung at exit, once in 3 runs). The
        barrier blocks here without the GIL until every earlier collective has completed on both sides, which
        gives the threads their turn; dropping DDP's reducer (it holds the group) then destroys the group at this
        known point rather than whenever the wrapper happens to be collected."""
        if self._owns_group and dist.is_initialized():
            barrier_before_leaving()
            self.module = self.model
            dist.destroy_process_group()
        self._owns_group = False


def _mesh(device: torch.device, world_size: int):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (world_size,))


def _shard(model: torch.nn.Module, mesh, forward_methods: tuple[str, ...] = ()) -> None:
    """FSDP2 in place: one shard group per transformer block (``transformer_blocks``, or the model's own
    ``fsdp_units()``; a block's weights are gathered just for its own forward; inner blocks first), then the root
    for what is left (embeddings, heads). ``forward_methods``: methods of the root other than ``forward``
    that run the model (a policy's ``evaluate``), which gather the root's own weights like ``forward`` does."""
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    blocks = model.fsdp_units() if hasattr(model, "fsdp_units") else transformer_blocks(model)
    for module in reversed(blocks):  # pre-order reversed: a block nested in another is sharded before it
        fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for method in forward_methods:
        register_fsdp_forward_method(model, method)


def transformer_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The submodules of ``model`` (pre-order) whose class a Hugging Face model inside it names in its
    ``_no_split_modules`` (decoder and encoder layers, embeddings): FSDP's shard groups."""
    block_names = set()
    for module in model.modules():
        block_names |= set(getattr(module, "_no_split_modules", None) or ())
    return [module for module in model.modules() if module is not model and type(module).__name__ in block_names]


def _reshard(model: torch.nn.Module) -> None:
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def _meta_skeleton(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` whose parameters are on the meta device (no memory; ties kept); buffers copied."""
    memo = {id(p): torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
            for p in model.parameters()}
    return copy.deepcopy(model, memo)


def _materialize(module: torch.nn.Module, device: torch.device, live: torch.nn.Module) -> torch.nn.Module:
    """``module`` (a copy of a ``_meta_skeleton``, sharded or not) given storage on ``device``, in place: parameters
    uninitialised, buffers (e.g. rotary frequencies, which no state dict holds) copied from ``live``."""
    module.to_empty(device=device)
    buffers = dict(live.named_buffers())
    with torch.no_grad():
        for name, buffer in module.named_buffers():
            buffer.copy_(buffers[name])
    return module

