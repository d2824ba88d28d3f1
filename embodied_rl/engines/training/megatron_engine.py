"""Megatron-core tensor and data parallelism as a trainer's engine (``actor.backend=megatron``): the Hugging Face
Llama or Qwen2 an ``LMActorWorker`` builds, trained as a Megatron GPT split over ``tensor_parallel_size`` TP ranks,
``world_size / tensor_parallel_size`` data-parallel copies of it (gloo, CPU), behind the part of
``DataParallelEngine``'s interface the worker uses.

Data: the ranks of one TP group (one copy) train on the same rows: ``shard`` hands each copy its contiguous slice
of the minibatch, and ``loss_scale`` is ``copies * local / global`` as ``DataParallelEngine``'s with the copies
for the ranks. Gradients: within a TP group each rank's backward yields its slice of its copy's gradient
(replicated norms get the same full gradient on every TP rank); ``clip_grad_norm_`` averages them over the
data-parallel group (one flat bucket) before the TP-wide norm. ``all_reduce_sum`` sums over every rank, which the
worker's metrics divide back out.

Precision: a bf16 checkpoint (``compute_dtype`` bfloat16) runs its forward and backward in bf16 (Megatron's
``bf16`` config) while AdamW updates float32 masters (``optimized_parameters``): ``clip_grad_norm_`` moves the
gradients into the masters in float32, ``after_step`` copies the masters back into the bf16 parameters.
Checkpoints and ``full_state_dict`` carry the masters, so a resumed run continues exactly.

Weights leave in HF names and layout (``full_state_dict``, ``full_module``), so the generation workers and
checkpoints see an HF model.

Collectives (every rank, same order): the constructor, every forward and backward of ``module`` or of a
``frozen_copy``, ``clip_grad_norm_``, ``full_state_dict``, ``full_module``, ``optimizer_state_dict``,
``all_reduce_sum``, ``broadcast_object``, ``check_same``.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from embodied_rl.engines.training import megatron_lm
from embodied_rl.engines.training.data_parallel import _materialize, _meta_skeleton
from embodied_rl.engines.training.megatron_llama import (MegatronLlama, gather_buckets, hf_to_megatron,
                                                         megatron_to_hf, shard)
from megatron.core import parallel_state


class MegatronLlamaEngine:
    """``model`` (an HF ``LlamaForCausalLM`` or ``Qwen2ForCausalLM``, float32, the same on every rank) converted
    to this rank's Megatron slice, its parameters in ``compute_dtype``.

    ``model`` / ``module``: the ``MegatronLlama`` (forward ``(input_ids, attention_mask) -> .logits [B, T, V]``),
    for training and no-grad forwards alike; the optimizer takes ``optimized_parameters()``. Joins torch's default
    process group (one such engine per process) through ``master_address:master_port`` as
    ``megatron_lm.initialize_tensor_parallel``. ``tensor_parallel_size`` None: every rank in one TP group.
    """

    backend = "megatron"
    distributed = True  # even at TP=1: weights must leave through full_state_dict, in HF names

    def __init__(self, model: torch.nn.Module, *, rank: int, world_size: int, device: torch.device,
                 tensor_parallel_size: int | None = None, compute_dtype: torch.dtype = torch.float32,
                 master_address: str = "127.0.0.1", master_port: int = 29500, served_store: bool = False,
                 timeout_s: float = 600.0):
        if device.type != "cpu":
            raise NotImplementedError(f"actor.backend=megatron runs on CPU over gloo only, not on {device}")
        self.rank, self.world_size, self.device = rank, world_size, device
        self.tp = world_size if tensor_parallel_size is None else tensor_parallel_size
        megatron_lm.initialize_tensor_parallel(self.tp, rank=rank, master_port=master_port, world_size=world_size,
                                               master_address=master_address, timeout_s=timeout_s,
                                               served_store=served_store)
        self.copies = world_size // self.tp
        self.copy = parallel_state.get_data_parallel_rank()
        self.compute_dtype = compute_dtype
        self.hf_config = model.config
        self.model = self.module = MegatronLlama(model.config, compute_dtype)
        self.dims = self.model.dims
        full = hf_to_megatron(model.state_dict(), model.config, self.tp)
        self.model.load_full(full)
        self.model.train(model.training)
        self.masters: dict[str, torch.nn.Parameter] | None = None
        """bf16 runs: this rank's float32 slice of each weight, by ``gpt`` parameter name (what AdamW updates)."""
        if compute_dtype != torch.float32:
            self.masters = {name: torch.nn.Parameter(shard(name, full[name].float(), self.dims[name]).clone())
                            for name, _ in self.model.gpt.named_parameters()}
        self._skeleton = _meta_skeleton(model) if rank == 0 else None  # HF structure, no weights: full_module

    def _trained(self) -> dict[str, torch.nn.Parameter]:
        """What the optimizer updates, by ``gpt`` parameter name: the float32 masters, or the parameters."""
        return self.masters if self.masters is not None else dict(self.model.gpt.named_parameters())

    def optimized_parameters(self) -> list[torch.nn.Parameter]:
        """The tensors to hand the optimizer (``after_step`` after each of its steps)."""
        return list(self._trained().values())

    @torch.no_grad()
    def after_step(self) -> None:
        """After an optimizer step: the bf16 parameters take the updated float32 masters (a no-op in float32)."""
        if self.masters is not None:
            for name, param in self.model.gpt.named_parameters():
                param.copy_(self.masters[name])

    def shard(self, items: list) -> list:
        """This copy's contiguous slice of ``items`` (the same list on every rank; every TP rank of a copy gets
        the same): ``len(items) // copies`` items each, the first ``len(items) % copies`` copies one more. May be
        empty."""
        size, extra = divmod(len(items), self.copies)
        start = self.copy * size + min(self.copy, extra)
        return list(items[start:start + size + (self.copy < extra)])

    def loss_scale(self, local_denominator: float, global_denominator: float) -> float:
        """``copies * local / global``: averaged over the copies, the gradients are the whole minibatch's."""
        return self.copies * float(local_denominator) / float(global_denominator)

    def _reduce_gradients(self) -> list[tuple[int | None, torch.Tensor]]:
        """The gradients of what the optimizer updates, ``(partition dim, grad)`` in ``gpt`` order: averaged over
        the data-parallel copies (one float32 bucket), moved into the float32 masters in bf16 runs."""
        params = list(self.model.gpt.named_parameters())
        if self.copies == 1 and self.masters is None:
            return [(self.dims[name], p.grad) for name, p in params if p.grad is not None]
        grads = [p.grad.float() if p.grad is not None else torch.zeros(p.shape) for _, p in params]
        if self.copies > 1:
            flat = _flatten_dense_tensors(grads)
            dist.all_reduce(flat, group=parallel_state.get_data_parallel_group())
            grads = _unflatten_dense_tensors(flat.div_(self.copies), grads)
        targets = self._trained()
        out = []
        for (name, param), grad in zip(params, grads):
            target = targets[name]
            if target is not param:  # bf16: the float32 gradient goes to the master; the bf16 one is freed
                target.grad, param.grad = grad, None
            elif param.grad is None:
                param.grad = grad
            else:
                param.grad.copy_(grad)
            out.append((self.dims[name], target.grad))
        return out

    def clip_grad_norm_(self, max_norm: float) -> float:
        """Average the gradients over the data-parallel copies and clip them to a global L2 norm of ``max_norm`` (as
        ``torch.nn.utils.clip_grad_norm_``); returns the norm before clipping. Sharded gradients' squares are
        summed over the TP group, replicated ones counted once."""
        grads = self._reduce_gradients()
        squares = torch.zeros(2, dtype=torch.float64)
        for dim, grad in grads:
            squares[int(dim is None)] += grad.double().pow(2).sum()
        sharded = squares[:1].clone()
        dist.all_reduce(sharded, group=parallel_state.get_tensor_model_parallel_group())
        norm = math.sqrt(sharded.item() + squares[1].item())
        coefficient = min(1.0, max_norm / (norm + 1e-6))
        if coefficient < 1.0:
            for _, grad in grads:
                grad.mul_(coefficient)
        return norm

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over ranks (the same length on each); one collective."""
        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def broadcast_object(self, value=None):
        """Rank 0's ``value`` (any picklable object) on every rank; one collective."""
        box = [value if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def check_same(self, value: int, what: str) -> None:
        """Raise on every rank unless every rank holds the same integer ``value`` (e.g. a seed)."""
        bounds = torch.tensor([-value, value], dtype=torch.int64)
        dist.all_reduce(bounds, op=dist.ReduceOp.MAX)
        if -bounds[0].item() != bounds[1].item():
            raise ValueError(f"{what} differs across tensor-parallel ranks (from {-bounds[0].item()} to "
                             f"{bounds[1].item()}); every rank must be given the same")

    def _full_megatron(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Full tensors by Megatron name from this rank's slices ``tensors`` (parameter-shaped, by name), gathered
        over the TP group in flat buckets."""
        return gather_buckets(tensors, self.dims)

    def full_state_dict(self, module: MegatronLlama | None = None) -> dict[str, torch.Tensor] | None:
        """On rank 0 the whole model (its float32 masters in a bf16 run; or ``module``, a ``frozen_copy``, in its
        dtype) as an HF state dict (the HF model's ``state_dict()`` keys), CPU copies; None on the others."""
        tensors = self._trained() if module is None else dict(module.gpt.named_parameters())
        full = self._full_megatron(tensors)
        return megatron_to_hf(full, self.hf_config) if self.rank == 0 else None

    @torch.no_grad()
    def load_full_state_dict(self, state: dict[str, torch.Tensor], module: MegatronLlama | None = None) -> None:
        """On every rank, the same whole-model HF ``state`` (``full_state_dict``'s keys) into the model (and its
        masters) or into ``module``: each rank keeps its slice."""
        full = hf_to_megatron({k: v.cpu() for k, v in state.items()}, self.hf_config, self.tp)
        (module or self.model).load_full(full)
        if module is None and self.masters is not None:
            for name, master in self.masters.items():
                master.copy_(shard(name, full[name], self.dims[name]))

    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """On every rank, the same ``optimizer_state_dict()`` (rank 0's, HF names) into ``optimizer``: each
        parameter-shaped entry converted like the weights and sliced for this rank, the scalars (AdamW's step)
        given to every parameter; the groups' settings (lr, betas, ...) as saved."""
        per_param = state["state"]
        params = self._trained()
        keys = sorted({key for entry in per_param.values() for key, value in entry.items()
                       if torch.is_tensor(value) and value.dim() > 0})
        optimizer.state.clear()
        for key in keys:
            full = hf_to_megatron({name: entry[key] for name, entry in per_param.items()}, self.hf_config,
                                  self.tp)
            for name, param in params.items():
                optimizer.state[param][key] = shard(name, full[name], self.dims[name]).clone()
        scalars = {key: value for entry in per_param.values() for key, value in entry.items()
                   if not (torch.is_tensor(value) and value.dim() > 0)}
        for param in params.values():
            optimizer.state[param].update({k: v.clone() if torch.is_tensor(v) else v for k, v in scalars.items()})
        for group, saved in zip(optimizer.param_groups, state["param_groups"]):
            group.update({k: v for k, v in saved.items() if k != "params"})

    def full_module(self) -> torch.nn.Module | None:
        """On rank 0 a fresh HF model holding the whole model (to save in the HF layout); None on the others."""
        state = self.full_state_dict()
        if state is None:
            return None
        module = _materialize(copy.deepcopy(self._skeleton), torch.device("cpu"), self._skeleton)
        module.load_state_dict(state)
        return module

    def frozen_copy(self) -> MegatronLlama:
        """A copy of the model as it is now (sliced like it), in eval mode and without gradients (a KL reference:
        its forwards are collective too)."""
        frozen = MegatronLlama(self.hf_config, self.compute_dtype)
        frozen.load_state_dict(self.model.state_dict())
        return frozen.eval().requires_grad_(False)

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict | None:
        """On rank 0 the optimizer's whole state keyed by HF parameter name (``torch.distributed.checkpoint``'s
        layout, as FSDP's): ``{"state": {name: {key: full tensor or scalar}}, "param_groups": [...]}``; each
        parameter-shaped state (e.g. AdamW's moments) gathered and converted like the weights. None elsewhere."""
        names = {id(p): name for name, p in self._trained().items()}
        by_key: dict[str, dict[str, torch.Tensor]] = {}
        scalars: dict[str, object] = {}
        for param, state in optimizer.state.items():
            for key, value in state.items():
                if torch.is_tensor(value) and value.shape == param.shape:
                    by_key.setdefault(key, {})[names[id(param)]] = value
                else:
                    scalars[key] = value  # e.g. AdamW's step, the same for every parameter
        moments = {key: self._full_megatron(tensors) for key, tensors in sorted(by_key.items())}
        if self.rank != 0:
            return None
        hf_names = [name for name, _ in self._skeleton.named_parameters()]  # a tied head once, as its embedding
        moments = {key: megatron_to_hf(full, self.hf_config) for key, full in moments.items()}
        state = {name: {**scalars, **{key: full[name] for key, full in moments.items()}}
                 for name in hf_names} if moments else {}
        groups = [{**{k: v for k, v in group.items() if k != "params"}, "params": hf_names}
                  for group in optimizer.state_dict()["param_groups"]]
        return {"state": state, "param_groups": groups}

    def close(self) -> None:
        """Leave Megatron's groups and the default process group."""
        megatron_lm.shutdown()
