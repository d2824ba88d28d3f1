"""Megatron-core tensor parallelism as a trainer's engine (``actor.backend=megatron``): the Hugging Face Llama an
``LMActorWorker`` builds, trained as a Megatron GPT split over ``world_size`` TP ranks (gloo, CPU), behind the part
of ``DataParallelEngine``'s interface the worker uses.

Every rank is handed the whole batch and trains on all of it: ``shard`` returns every item and ``loss_scale`` is
1, since each rank's backward already yields its slice of the full loss's gradient (no gradient averaging: the
replicated norms get the same full gradient on every rank). ``all_reduce_sum`` still sums over the ranks, which
the worker's metrics divide back out. Weights leave in HF names and layout (``full_state_dict``, ``full_module``),
so the generation workers and checkpoints see an HF model.

Collectives (every rank, same order): the constructor, every forward and backward of ``module`` or of a
``frozen_copy``, ``clip_grad_norm_``, ``full_state_dict``, ``full_module``, ``optimizer_state_dict``,
``all_reduce_sum``, ``check_same``.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.distributed as dist

from embodied_rl.engines.training import megatron_lm
from embodied_rl.engines.training.data_parallel import _materialize, _meta_skeleton
from embodied_rl.engines.training.megatron_llama import (MegatronLlama, gather, hf_to_megatron, megatron_to_hf,
                                                         shard)


class MegatronLlamaEngine:
    """``model`` (an HF ``LlamaForCausalLM``, the same on every rank) converted to this rank's Megatron slice.

    ``model`` / ``module``: the ``MegatronLlama`` (forward ``(input_ids, attention_mask) -> .logits [B, T, V]``),
    for the optimizer and for training and no-grad forwards alike. Joins torch's default process group (one such
    engine per process) through ``master_address:master_port`` as ``megatron_lm.initialize_tensor_parallel``.
    """

    backend = "megatron"
    distributed = True  # even at TP=1: weights must leave through full_state_dict, in HF names

    def __init__(self, model: torch.nn.Module, *, rank: int, world_size: int, device: torch.device,
                 master_address: str = "127.0.0.1", master_port: int = 29500, served_store: bool = False,
                 timeout_s: float = 600.0):
        if device.type != "cpu":
            raise NotImplementedError(f"actor.backend=megatron runs on CPU over gloo only, not on {device}")
        self.rank, self.world_size, self.device = rank, world_size, device
        megatron_lm.initialize_tensor_parallel(world_size, rank=rank, master_port=master_port,
                                               master_address=master_address, timeout_s=timeout_s,
                                               served_store=served_store)
        self.hf_config = model.config
        self.model = self.module = MegatronLlama(model.config)
        self.model.load_full(hf_to_megatron(model.state_dict(), model.config, world_size))
        self.model.train(model.training)
        self.dims = self.model.dims
        self._skeleton = _meta_skeleton(model) if rank == 0 else None  # HF structure, no weights: full_module

    def shard(self, items: list) -> list:
        """All of ``items``: every TP rank trains on the whole minibatch."""
        return list(items)

    def loss_scale(self, local_denominator: float, global_denominator: float) -> float:
        """1: each rank's loss is the whole minibatch's, and its gradients are not averaged over ranks."""
        return 1.0

    def clip_grad_norm_(self, max_norm: float) -> float:
        """Clip the gradients to a global L2 norm of ``max_norm`` (as ``torch.nn.utils.clip_grad_norm_``); returns
        the norm before clipping. Sharded gradients' squares are summed over ranks, replicated ones counted once."""
        grads = [(self.dims[name], p.grad) for name, p in self.model.gpt.named_parameters() if p.grad is not None]
        squares = torch.zeros(2, dtype=torch.float64)
        for dim, grad in grads:
            squares[int(dim is None)] += grad.double().pow(2).sum()
        sharded = squares[:1].clone()
        dist.all_reduce(sharded)
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
        """Full tensors by Megatron name from this rank's slices ``tensors`` (parameter-shaped, by name)."""
        return {name: gather(name, tensor, self.dims[name]) for name, tensor in tensors.items()}

    def full_state_dict(self, module: MegatronLlama | None = None) -> dict[str, torch.Tensor] | None:
        """On rank 0 the whole model (or ``module``, a ``frozen_copy``) as an HF state dict (the HF model's
        ``state_dict()`` keys), CPU copies; None on the others."""
        full = self._full_megatron(dict((module or self.model).gpt.named_parameters()))
        return megatron_to_hf(full, self.hf_config) if self.rank == 0 else None

    def load_full_state_dict(self, state: dict[str, torch.Tensor], module: MegatronLlama | None = None) -> None:
        """On every rank, the same whole-model HF ``state`` (``full_state_dict``'s keys) into the model (or
        ``module``): each rank keeps its slice."""
        (module or self.model).load_full(hf_to_megatron({k: v.cpu() for k, v in state.items()}, self.hf_config,
                                                        self.world_size))

    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """On every rank, the same ``optimizer_state_dict()`` (rank 0's, HF names) into ``optimizer``: each
        parameter-shaped entry converted like the weights and sliced for this rank, the scalars (AdamW's step)
        given to every parameter; the groups' settings (lr, betas, ...) as saved."""
        per_param = state["state"]
        params = dict(self.model.gpt.named_parameters())
        keys = sorted({key for entry in per_param.values() for key, value in entry.items()
                       if torch.is_tensor(value) and value.dim() > 0})
        optimizer.state.clear()
        for key in keys:
            full = hf_to_megatron({name: entry[key] for name, entry in per_param.items()}, self.hf_config,
                                  self.world_size)
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
        frozen = MegatronLlama(self.hf_config)
        frozen.load_state_dict(self.model.state_dict())
        return frozen.eval().requires_grad_(False)

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict | None:
        """On rank 0 the optimizer's whole state keyed by HF parameter name (``torch.distributed.checkpoint``'s
        layout, as FSDP's): ``{"state": {name: {key: full tensor or scalar}}, "param_groups": [...]}``; each
        parameter-shaped state (e.g. AdamW's moments) gathered and converted like the weights. None elsewhere."""
        names = {id(p): name for name, p in self.model.gpt.named_parameters()}
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
