"""A Hugging Face Llama or Qwen2 (``LlamaForCausalLM``, ``Qwen2ForCausalLM``) as a megatron-core GPT, and its weights
both ways.

``MegatronLlama(hf_config)`` is the same network as the HF model, split by tensor parallelism: rotary positions
(base = the HF ``rope_theta``, rotate-half as HF), RMSNorm, SwiGLU MLP, grouped-query attention, no linear biases
except Qwen2's on q, k and v (Megatron's ``add_qkv_bias``), embeddings tied or not as the HF config says. Its
forward takes HF's arguments and returns ``.logits`` like HF.
Call ``megatron_lm.initialize_tensor_parallel`` first.

Weights: ``hf_to_megatron`` / ``megatron_to_hf`` convert between an HF state dict and the *full* (unsharded)
Megatron one; ``shard`` cuts a full Megatron tensor to this rank's slice, ``gather_buckets`` gathers whole ones
from every rank's slices (in flat buckets, one all-gather each). The Megatron layout
(the local layer spec: every norm its own ``torch.nn.RMSNorm`` module, none fused into a linear):

* ``linear_qkv.weight`` ``[G * (Q/G + 2) * d, H]``: rows grouped by query group g (G = ``num_key_value_heads``),
  each ``[its Q/G query heads; key head g; value head g]``, ``d`` rows a head; TP ranks hold whole groups; Qwen2's
  ``linear_qkv.bias`` ``[G * (Q/G + 2) * d]`` in the same order;
* ``linear_fc1.weight`` ``[2F, H]`` = ``[gate; up]`` in the full tensor, but each TP rank's slice is
  ``[its gate rows; its up rows]`` (Megatron's GLU chunks the local output in two), so it is sharded strided;
* the vocabulary is padded to a multiple of the TP size (``padded_vocab``) with zero rows; the logits are cut
  back to the HF vocabulary, so the pad rows get no gradient and are dropped on the way back.

One more CUDA-only call is bypassed (see ``megatron_lm`` for the others): ``RotaryEmbedding.get_emb`` moves its
frequencies to ``torch.cuda.current_device()``; ``_HostRotaryEmbedding`` keeps them where they are.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import torch
import torch.nn.functional as F

from embodied_rl.engines.training import megatron_lm

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*(Transformer Engine|Apex).* not installed")
    from megatron.core import parallel_state
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig

FC1 = "mlp.linear_fc1.weight"


class LMOutput(NamedTuple):
    logits: torch.Tensor
    """``[B, T, V]`` float32 (a bf16 model's computed in bf16, then cast), V the HF vocabulary."""


def rope_theta(hf_config) -> float:
    """The rotary base; transformers >= 5 keeps it in ``rope_parameters``, older versions as ``rope_theta``."""
    rope = getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise NotImplementedError(f"rope scaling {rope}: only plain rotary positions")
    return float(rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0)))


def head_dim(hf_config) -> int:
    return getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads


def padded_vocab(vocab: int, tp: int) -> int:
    return -(-vocab // tp) * tp


def qkv_bias(hf_config) -> bool:
    """Whether the model has biases on q, k and v (Qwen2 always does; a Llama with ``attention_bias``)."""
    return hf_config.model_type == "qwen2"


def check_llama(hf_config, tp: int) -> None:
    """Raise unless ``hf_config`` is a Llama or Qwen2 this module reproduces, splittable ``tp`` ways."""
    c = hf_config
    unsupported = {"model_type": c.model_type not in ("llama", "qwen2"),
                   "attention_bias": getattr(c, "attention_bias", False),
                   "mlp_bias": getattr(c, "mlp_bias", False), "hidden_act": c.hidden_act != "silu",
                   "use_sliding_window": bool(getattr(c, "use_sliding_window", False))}
    bad = [key for key, is_bad in unsupported.items() if is_bad]
    if bad:
        raise NotImplementedError(f"{', '.join(f'{k}={getattr(c, k)!r}' for k in bad)}: only a Llama without "
                                  "biases or a Qwen2 (biases on q, k, v), with a SwiGLU MLP and full attention")
    for field in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        if getattr(c, field) % tp:
            raise ValueError(f"{field}={getattr(c, field)} does not divide by tensor-parallel size {tp}")
    rope_theta(c)


def transformer_config(hf_config, tp: int, dtype: torch.dtype = torch.float32) -> TransformerConfig:
    """Megatron's config of ``hf_config``'s network, its parameters in ``dtype`` (float32 or bfloat16; with bf16
    attention's softmax still runs in float32, as Megatron's default)."""
    if dtype not in (torch.float32, torch.bfloat16):
        raise NotImplementedError(f"parameters in {dtype}: float32 or bfloat16 only")
    c = hf_config
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="full scope is deprecated")  # a default of megatron-core's own
        return TransformerConfig(
            num_layers=c.num_hidden_layers, hidden_size=c.hidden_size, num_attention_heads=c.num_attention_heads,
            num_query_groups=c.num_key_value_heads, kv_channels=head_dim(c), ffn_hidden_size=c.intermediate_size,
            normalization="RMSNorm", layernorm_epsilon=c.rms_norm_eps, gated_linear_unit=True,
            activation_func=F.silu, add_bias_linear=False, add_qkv_bias=qkv_bias(c), bias_activation_fusion=False,
            tensor_model_parallel_size=tp, hidden_dropout=0.0, attention_dropout=0.0,
            use_cpu_initialization=True, perform_initialization=False, params_dtype=dtype,
            bf16=dtype == torch.bfloat16)


class _HostRotaryEmbedding(RotaryEmbedding):
    """``RotaryEmbedding`` whose ``get_emb`` leaves the frequencies on their device (Megatron's moves them to
    CUDA): ``[T, 1, 1, d]``, the angles of each position repeated for both halves of a head (rotate-half)."""

    def get_emb(self, max_seq_len: int, offset: int = 0) -> torch.Tensor:
        if self.rotary_interleaved:
            raise NotImplementedError("interleaved rotary positions")
        freqs = self.get_freqs_non_repeated(max_seq_len, offset)
        return torch.cat((freqs, freqs), dim=-1)[:, None, None, :]


class MegatronLlama(torch.nn.Module):
    """This TP rank's slice of ``hf_config``'s Llama (weights uninitialised: ``load_full``), its parameters in
    ``dtype`` (float32 or bfloat16). ``gpt``: the Megatron ``GPTModel``."""

    def __init__(self, hf_config, dtype: torch.dtype = torch.float32):
        super().__init__()
        tp = parallel_state.get_tensor_model_parallel_world_size()
        check_llama(hf_config, tp)
        self.vocab = hf_config.vocab_size
        self.tied = bool(hf_config.tie_word_embeddings)
        self.dtype = dtype
        self.gpt = GPTModel(transformer_config(hf_config, tp, dtype), get_gpt_layer_local_spec(normalization="RMSNorm"),
                            vocab_size=padded_vocab(self.vocab, tp),
                            max_sequence_length=hf_config.max_position_embeddings, position_embedding_type="rope",
                            rotary_base=rope_theta(hf_config), share_embeddings_and_output_weights=self.tied,
                            parallel_output=True)
        self.gpt.rotary_pos_emb = _HostRotaryEmbedding(kv_channels=head_dim(hf_config), rotary_percent=1.0,
                                                       rotary_base=rope_theta(hf_config),
                                                       use_cpu_initialization=True)
        for module in self.gpt.modules():  # the local spec's torch norms are made in float32 whatever the config
            if isinstance(module, torch.nn.RMSNorm):
                module.to(dtype)
        self.dims = megatron_lm.partition_dims(self.gpt)
        """Per ``gpt`` parameter name, the dimension its TP slices split (None: replicated)."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> LMOutput:
        """``input_ids [B, T]``; ``attention_mask [B, T]`` (1: a token, 0: padding) masks padding keys as HF does.
        Positions are ``0..T-1`` in every row, as in HF without ``position_ids``: right-padded rows are exact."""
        length = input_ids.shape[1]
        masked = torch.triu(torch.ones(length, length, dtype=torch.bool, device=input_ids.device), 1)[None, None]
        if attention_mask is not None:
            masked = masked | (attention_mask == 0)[:, None, None, :]  # [B, 1, T, T], True: not attended
        positions = torch.arange(length, device=input_ids.device).expand_as(input_ids)
        local = self.gpt(input_ids, positions, attention_mask=masked)  # [B, T, V_padded / tp]
        if parallel_state.get_tensor_model_parallel_world_size() > 1:
            local = megatron_lm._GatherLastDim.apply(local)
        return LMOutput(local[..., :self.vocab].float())

    @torch.no_grad()
    def load_full(self, full: dict[str, torch.Tensor]) -> None:
        """Copy this rank's slice of each full Megatron tensor into the parameters (cast to their dtype)."""
        for name, param in self.gpt.named_parameters():
            param.copy_(shard(name, full[name], self.dims[name]))


def shard(name: str, full: torch.Tensor, dim: int | None) -> torch.Tensor:
    """This rank's slice of the full tensor ``name`` split along ``dim`` (None: the whole, replicated)."""
    tp, rank = parallel_state.get_tensor_model_parallel_world_size(), parallel_state.get_tensor_model_parallel_rank()
    if dim is None:
        return full
    if name.endswith(FC1):
        return torch.cat([half.chunk(tp, dim=0)[rank] for half in full.chunk(2, dim=0)])
    return full.chunk(tp, dim=dim)[rank]


def assemble(name: str, shards: list[torch.Tensor], dim: int) -> torch.Tensor:
    """The full tensor ``name`` from every TP rank's slice, in rank order (``shard``'s inverse)."""
    if name.endswith(FC1):
        gates, ups = zip(*(s.chunk(2, dim=0) for s in shards))
        return torch.cat([*gates, *ups])
    return torch.cat(shards, dim=dim)


def gather_buckets(tensors: dict[str, torch.Tensor], dims: dict[str, int | None],
                   bucket_bytes: int = 64 << 20) -> dict[str, torch.Tensor]:
    """The full tensor of every tensor in ``tensors`` (this rank's slices by name; replicated ones, ``dims``
    None, copied), the split ones packed into flat buckets of at most ``bucket_bytes`` (a larger tensor alone) per
    dtype: one all-gather per bucket instead of one per tensor. Collective over the TP group; every rank passes the
    same names in the same order."""
    tp = parallel_state.get_tensor_model_parallel_world_size()
    full = {name: local.detach().clone() for name, local in tensors.items() if dims[name] is None or tp == 1}
    split = [(name, local.detach()) for name, local in tensors.items() if name not in full]
    buckets: list[list[tuple[str, torch.Tensor]]] = []
    for name, local in split:
        open_bucket = next((b for b in buckets if b[0][1].dtype == local.dtype and sum(
            t.numel() * t.element_size() for _, t in b) + local.numel() * local.element_size() <= bucket_bytes), None)
        if open_bucket is None:
            buckets.append([(name, local)])
        else:
            open_bucket.append((name, local))
    group = parallel_state.get_tensor_model_parallel_group()
    for bucket in buckets:
        flat = torch.cat([local.reshape(-1) for _, local in bucket])
        gathered = [torch.empty_like(flat) for _ in range(tp)]
        torch.distributed.all_gather(gathered, flat, group=group)
        offset = 0
        for name, local in bucket:
            shards = [g[offset:offset + local.numel()].view(local.shape) for g in gathered]
            full[name] = assemble(name, shards, dims[name])
            offset += local.numel()
    return {name: full[name] for name in tensors}


def hf_to_megatron(hf: dict[str, torch.Tensor], hf_config, tp: int) -> dict[str, torch.Tensor]:
    """The full Megatron state dict of an HF Llama state dict (vocabulary padded for ``tp`` ranks)."""
    c = hf_config
    groups, d = c.num_key_value_heads, head_dim(c)
    per_group = c.num_attention_heads // groups
    vocab = padded_vocab(c.vocab_size, tp)

    def pad(weight: torch.Tensor) -> torch.Tensor:  # [V, H] -> [V_padded, H], zero rows
        return torch.cat([weight, weight.new_zeros(vocab - weight.shape[0], weight.shape[1])])

    full = {"embedding.word_embeddings.weight": pad(hf["model.embed_tokens.weight"]),
            "decoder.final_layernorm.weight": hf["model.norm.weight"]}
    if not c.tie_word_embeddings:
        full["output_layer.weight"] = pad(hf["lm_head.weight"])
    for i in range(c.num_hidden_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        q = hf[h + "self_attn.q_proj.weight"].reshape(groups, per_group * d, -1)
        k = hf[h + "self_attn.k_proj.weight"].reshape(groups, d, -1)
        v = hf[h + "self_attn.v_proj.weight"].reshape(groups, d, -1)
        if qkv_bias(c):
            full[m + "self_attention.linear_qkv.bias"] = torch.cat([
                hf[h + "self_attn.q_proj.bias"].reshape(groups, per_group * d),
                hf[h + "self_attn.k_proj.bias"].reshape(groups, d),
                hf[h + "self_attn.v_proj.bias"].reshape(groups, d)], dim=1).reshape(-1)
        full.update({
            m + "input_layernorm.weight": hf[h + "input_layernorm.weight"],
            m + "self_attention.linear_qkv.weight": torch.cat([q, k, v], dim=1).reshape(-1, q.shape[-1]),
            m + "self_attention.linear_proj.weight": hf[h + "self_attn.o_proj.weight"],
            m + "pre_mlp_layernorm.weight": hf[h + "post_attention_layernorm.weight"],
            m + FC1: torch.cat([hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"]]),
            m + "mlp.linear_fc2.weight": hf[h + "mlp.down_proj.weight"]})
    return {name: tensor.detach().clone() for name, tensor in full.items()}


def megatron_to_hf(full: dict[str, torch.Tensor], hf_config) -> dict[str, torch.Tensor]:
    """The HF Llama state dict (``LlamaForCausalLM.state_dict()``'s keys; ``lm_head.weight`` the embedding itself
    when tied) of a full Megatron state dict (any vocabulary padding dropped)."""
    c = hf_config
    groups, d = c.num_key_value_heads, head_dim(c)
    per_group = c.num_attention_heads // groups
    embed = full["embedding.word_embeddings.weight"][:c.vocab_size]
    hf = {"model.embed_tokens.weight": embed}
    for i in range(c.num_hidden_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        qkv = full[m + "self_attention.linear_qkv.weight"]
        q, k, v = qkv.reshape(groups, (per_group + 2) * d, -1).split([per_group * d, d, d], dim=1)
        gate, up = full[m + FC1].chunk(2)
        biases = {}
        if qkv_bias(c):
            qb, kb, vb = full[m + "self_attention.linear_qkv.bias"].reshape(groups, (per_group + 2) * d).split(
                [per_group * d, d, d], dim=1)
            biases = {"q": qb.reshape(-1), "k": kb.reshape(-1), "v": vb.reshape(-1)}
        for letter, weight in zip("qkv", (q, k, v)):  # HF's order: each projection's weight, then its bias
            hf[h + f"self_attn.{letter}_proj.weight"] = weight.reshape(-1, qkv.shape[-1])
            if biases:
                hf[h + f"self_attn.{letter}_proj.bias"] = biases[letter]
        hf.update({
            h + "self_attn.o_proj.weight": full[m + "self_attention.linear_proj.weight"],
            h + "mlp.gate_proj.weight": gate, h + "mlp.up_proj.weight": up,
            h + "mlp.down_proj.weight": full[m + "mlp.linear_fc2.weight"],
            h + "input_layernorm.weight": full[m + "input_layernorm.weight"],
            h + "post_attention_layernorm.weight": full[m + "pre_mlp_layernorm.weight"]})
    hf["model.norm.weight"] = full["decoder.final_layernorm.weight"]
    hf["lm_head.weight"] = embed if c.tie_word_embeddings else full["output_layer.weight"][:c.vocab_size]
    return {name: tensor.contiguous() for name, tensor in hf.items()}
