"""Megatron-core as a training engine: a GPT decoder split by tensor parallelism, on CPU over gloo (or wherever
torch.distributed runs), behind four calls: ``logits``, ``token_logprobs``, ``train_step``, ``full_state_dict``.

The one file that touches Megatron (``megatron-core==0.16.1``, the ``megatron`` extra). Megatron-core assumes CUDA
in two places on the path used here; each is bypassed through an object Megatron itself owns, never by patching
torch:

* the current-device query: attention takes its scratch buffer from ``parallel_state``'s global memory buffer,
  which allocates on ``torch.cuda.current_device()``; after ``initialize_model_parallel`` that buffer is replaced
  by ``_HostMemoryBuffer``, which allocates on the host (``_bypass_cuda_memory_buffer``);
* the model-parallel RNG tracker: attention (and embedding) dropout run under ``get_cuda_rng_tracker().fork()``,
  whose training tracker needs CUDA RNG states; Megatron's inference tracker, whose ``fork`` is a null context,
  is installed instead (``initialize_rng_tracker(inference_rng_tracker=True)``). That is only sound because
  dropout is 0 here (``GPTSpec`` has no dropout setting): with dropout on, every TP rank would draw the same
  masks from torch's CPU generator.

Two more CUDA defaults are avoided rather than bypassed: the causal mask that the unfused softmax builds with
``device="cuda"`` when given none (every forward passes its own), and Megatron's logit gather
(``gather_from_tensor_model_parallel_region``, which allocates on the current CUDA device; ``_GatherLastDim``
here).

Limits: tensor and data parallelism (pipeline parallel size 1; ``MegatronGPTEngine`` itself is tested at data
parallel size 1, ``megatron_engine`` averages gradients over the data-parallel group); sequence
parallelism, fused kernels, Transformer Engine, Apex and Megatron's distributed optimizer off; learned absolute
positions, LayerNorm, GeLU MLP with biases (no gated MLP: its fc1 shards are strided), untied output layer,
float32. The full state dict is in Megatron's names and layout (``linear_qkv`` rows grouped by head: q, k, v per
head), not a Hugging Face model's; no gradient clipping (it would need a TP-wide norm).

The Hugging Face Llama as such a GPT (rotary positions, RMSNorm, SwiGLU, grouped-query attention, weights
converted both ways) is ``megatron_llama``; trained as a trainer backend (``actor.backend=megatron``, with a
TP-wide gradient clip) by ``megatron_engine``. Both use this module's process-group set-up, bypasses and gather.
"""

from __future__ import annotations

import datetime
import math
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from embodied_rl.engines.training.data_parallel import barrier_before_leaving

with warnings.catch_warnings():  # without Transformer Engine and Apex it falls back to torch, which is the point
    warnings.filterwarnings("ignore", message=".*(Transformer Engine|Apex).* not installed")
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel.random import initialize_rng_tracker
    from megatron.core.transformer import TransformerConfig
    from megatron.core.utils import GlobalMemoryBuffer


@dataclass(frozen=True)
class GPTSpec:
    """A GPT decoder's size. ``vocab``, ``heads`` and ``ffn`` must divide by the tensor-parallel size."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    init_std: float = 0.02


class _HostMemoryBuffer(GlobalMemoryBuffer):
    """Megatron's reusable scratch buffer (``GlobalMemoryBuffer.get_tensor``), allocated on the host."""

    def get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None):
        numel = math.prod(tensor_shape)
        held = self.buffer.get((name, dtype))
        if held is None or held.numel() < numel:
            held = self.buffer[(name, dtype)] = torch.empty(numel, dtype=dtype)
        return held[:numel].view(*tensor_shape)


def _bypass_cuda_memory_buffer() -> None:
    parallel_state._GLOBAL_MEMORY_BUFFER = _HostMemoryBuffer()


class _GatherLastDim(torch.autograd.Function):
    """``[..., N / tp] -> [..., N]`` across the TP group; the gradient keeps this rank's slice. Megatron's own
    ``gather_from_tensor_model_parallel_region`` allocates on ``torch.cuda.current_device()``."""

    @staticmethod
    def forward(ctx, shard: torch.Tensor) -> torch.Tensor:
        group = parallel_state.get_tensor_model_parallel_group()
        tp = parallel_state.get_tensor_model_parallel_world_size()
        shards = [torch.empty_like(shard) for _ in range(tp)]
        dist.all_gather(shards, shard.contiguous(), group=group)
        return torch.cat(shards, dim=-1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        tp = parallel_state.get_tensor_model_parallel_world_size()
        return grad.chunk(tp, dim=-1)[parallel_state.get_tensor_model_parallel_rank()].contiguous()


def initialize_tensor_parallel(tp_size: int, *, rank: int, master_port: int, master_address: str = "127.0.0.1",
                               timeout_s: float = 600.0, served_store: bool = False,
                               world_size: int | None = None) -> None:
    """Join a world of ``world_size`` processes (default ``tp_size``; gloo, the process-wide default group:
    Megatron builds its groups from it, so one such engine per process) and set up Megatron's parallel state:
    tensor-parallel groups of ``tp_size`` consecutive ranks, ``world_size / tp_size`` data-parallel copies.

    ``master_address:master_port``: where the rendezvous store is: served by rank 0 (``served_store`` False; the
    port must still be free) or by another process, every rank a client (True: ``data_parallel.serve_rendezvous``,
    race-free). gloo's interface follows ``GLOO_SOCKET_IFNAME`` where set. Collectives that wait longer than
    ``timeout_s`` fail.
    """
    world_size = tp_size if world_size is None else world_size
    if world_size % tp_size:
        raise ValueError(f"world of {world_size} processes does not divide into tensor-parallel groups of {tp_size}")
    if not dist.is_initialized():
        timeout = datetime.timedelta(seconds=timeout_s)
        if served_store:
            where = dict(store=dist.TCPStore(master_address, master_port, world_size, is_master=False,
                                             timeout=timeout))
        else:
            where = dict(init_method=f"tcp://{master_address}:{master_port}")
        dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timeout, **where)
    if dist.get_world_size() != world_size:
        raise ValueError(f"this process is already in a world of {dist.get_world_size()}, not {world_size}")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp_size, create_gloo_process_groups=False)
    _bypass_cuda_memory_buffer()
    initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)  # a no-op fork(): see the module docstring


def shutdown() -> None:
    """Undo ``initialize_tensor_parallel``: Megatron's groups (its memory buffer with them) and the default group.
    Every rank calls it; the barrier first lets gloo's threads free the last collective's tensors before the groups'
    destructors join them (``DataParallelEngine.close`` says why that matters)."""
    if dist.is_initialized():
        barrier_before_leaving()
    parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def partition_dims(model: torch.nn.Module) -> dict[str, int | None]:
    """Per parameter name, the dimension its TP shards split (None: replicated on every rank), from the layer
    types: column-parallel linears (QKV, MLP up, output layer) and the vocab-parallel embedding split their rows
    (bias too), row-parallel linears (attention and MLP out) their columns (bias replicated). Megatron's own
    ``tensor_model_parallel`` parameter attributes are only set when Megatron initialises the weights itself."""
    dims: dict[str, int | None] = {}
    for prefix, module in model.named_modules():
        for name, _ in module.named_parameters(recurse=False):
            if isinstance(module, (tensor_parallel.ColumnParallelLinear, tensor_parallel.VocabParallelEmbedding)):
                dim = 0
            elif isinstance(module, tensor_parallel.RowParallelLinear):
                dim = 1 if name == "weight" else None
            elif "Parallel" in type(module).__name__:  # another layer spec's layers: their split is unknown here
                raise NotImplementedError(f"{prefix}: {type(module).__name__}")
            else:
                dim = None
            dims[f"{prefix}.{name}" if prefix else name] = dim
    return dims


def full_initial_weights(full_shapes: dict[str, tuple[int, ...]], spec: GPTSpec,
                         seed: int) -> dict[str, torch.Tensor]:
    """Unsharded initial weights by parameter name, the same for every TP size: one generator seeded by ``seed``
    draws each full tensor in the order of ``full_shapes`` (``named_parameters`` order): normal(0, init_std) for
    matrices and embeddings, scaled by 1/sqrt(2 * layers) for each layer's two output projections as in
    Megatron; ones for norm scales; zeros for biases."""
    generator = torch.Generator().manual_seed(seed)
    full = {}
    for name, shape in full_shapes.items():
        if name.endswith("bias"):
            full[name] = torch.zeros(shape)
        elif len(shape) == 1:  # layernorm scale
            full[name] = torch.ones(shape)
        else:
            std = spec.init_std
            if name.endswith(("linear_proj.weight", "linear_fc2.weight")):
                std /= math.sqrt(2.0 * spec.layers)
            full[name] = torch.randn(shape, generator=generator) * std
    return full


class MegatronGPTEngine:
    """This rank's shard of a GPT decoder and its optimizer (torch AdamW or SGD over the local shards).

    Every rank of the TP group calls each method with the same arguments (the batch is replicated); every rank
    gets the same full results. Call ``initialize_tensor_parallel`` first.
    """

    def __init__(self, spec: GPTSpec, *, seed: int = 0, optimizer: str = "adamw", lr: float = 1e-3,
                 weight_decay: float = 0.0, adam_eps: float = 1e-8):
        tp = parallel_state.get_tensor_model_parallel_world_size()
        for field in ("vocab", "heads", "ffn"):
            if getattr(spec, field) % tp:
                raise ValueError(f"{field}={getattr(spec, field)} does not divide by tensor-parallel size {tp}")
        self.spec = spec
        config = TransformerConfig(
            num_layers=spec.layers, hidden_size=spec.hidden, num_attention_heads=spec.heads,
            ffn_hidden_size=spec.ffn, tensor_model_parallel_size=tp, hidden_dropout=0.0, attention_dropout=0.0,
            use_cpu_initialization=True, perform_initialization=False, params_dtype=torch.float32)
        self.model = GPTModel(config, get_gpt_layer_local_spec(), vocab_size=spec.vocab,
                              max_sequence_length=spec.max_positions, position_embedding_type="learned_absolute",
                              share_embeddings_and_output_weights=False, parallel_output=True)
        self.partition_dims = partition_dims(self.model)
        self.full_shapes = {name: self._full_shape(name, param) for name, param in self.model.named_parameters()}
        self.load_full_state_dict(full_initial_weights(self.full_shapes, spec, seed))
        params = list(self.model.parameters())
        if optimizer == "adamw":
            self.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, eps=adam_eps)
        elif optimizer == "sgd":
            self.optimizer = torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
        else:
            raise ValueError(f"optimizer={optimizer!r}; allowed: adamw, sgd")

    def _full_shape(self, name: str, param: torch.Tensor) -> tuple[int, ...]:
        shape, dim = list(param.shape), self.partition_dims[name]
        if dim is not None:
            shape[dim] *= parallel_state.get_tensor_model_parallel_world_size()
        return tuple(shape)

    def _local_logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``[B, T, V / tp]``: this rank's vocabulary slice of the logits for ``input_ids [B, T]``."""
        batch, length = input_ids.shape
        if length > self.spec.max_positions:
            raise ValueError(f"sequence of {length} tokens, max_positions={self.spec.max_positions}")
        positions = torch.arange(length).expand(batch, length)
        causal = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)[None, None]  # True: masked
        return self.model(input_ids, positions, attention_mask=causal)

    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``[B, T, V]`` float32 logits for ``input_ids [B, T]`` (right-padded rows are fine: attention is causal),
        gathered across the TP ranks (differentiable)."""
        local = self._local_logits(input_ids)
        return local if parallel_state.get_tensor_model_parallel_world_size() == 1 else _GatherLastDim.apply(local)

    def token_logprobs(self, input_ids: torch.Tensor, target_ids: torch.Tensor) -> torch.Tensor:
        """``[B, T]``: ``log p(target_ids[b, t] | input_ids[b, :t + 1])``, differentiable. For next-token log-probs
        of a sequence ``s``, pass ``s[:, :-1]`` and ``s[:, 1:]``. Computed on the vocabulary shards (Megatron's
        vocab-parallel cross entropy): the full ``[B, T, V]`` logits are never gathered."""
        return -tensor_parallel.vocab_parallel_cross_entropy(self._local_logits(input_ids), target_ids)

    def train_step(self, input_ids: torch.Tensor, target_ids: torch.Tensor, loss_mask: torch.Tensor | None = None,
                   loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None) -> float:
        """One optimizer step; returns the loss. ``loss_fn(logprobs [B, T]) -> scalar`` (e.g. a policy-gradient
        loss); by default the mean negative log-likelihood over ``loss_mask [B, T]`` (all ones if None)."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        logprobs = self.token_logprobs(input_ids, target_ids)
        if loss_fn is not None:
            loss = loss_fn(logprobs)
        else:
            mask = torch.ones_like(logprobs) if loss_mask is None else loss_mask.to(logprobs.dtype)
            loss = -(logprobs * mask).sum() / mask.sum().clamp(min=1)
        loss.backward()
        # Replicated parameters (norms, row-parallel biases, positions) get the same full gradient on every rank
        # without sequence parallelism, so no gradient all-reduce is needed within the TP group.
        self.optimizer.step()
        return loss.item()

    @torch.no_grad()
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Full (unsharded) tensors by Megatron parameter name, the same on every rank: TP shards gathered along
        their partition dimension, replicated parameters copied."""
        group = parallel_state.get_tensor_model_parallel_group()
        tp = parallel_state.get_tensor_model_parallel_world_size()
        full = {}
        for name, param in self.model.named_parameters():
            dim = self.partition_dims[name]
            if dim is not None and tp > 1:
                shards = [torch.empty_like(param) for _ in range(tp)]
                dist.all_gather(shards, param.detach().contiguous(), group=group)
                full[name] = torch.cat(shards, dim=dim)
            else:
                full[name] = param.detach().clone()
        return full

    @torch.no_grad()
    def load_full_state_dict(self, full: dict[str, torch.Tensor]) -> None:
        """Copy this rank's slice of each full tensor into its parameter (the inverse of ``full_state_dict``)."""
        rank = parallel_state.get_tensor_model_parallel_rank()
        tp = parallel_state.get_tensor_model_parallel_world_size()
        for name, param in self.model.named_parameters():
            tensor, dim = full[name], self.partition_dims[name]
            if tuple(tensor.shape) != self.full_shapes[name]:
                raise ValueError(f"{name}: full shape {tuple(tensor.shape)}, expected {self.full_shapes[name]}")
            if dim is not None:
                tensor = tensor.chunk(tp, dim=dim)[rank]
            param.copy_(tensor)
