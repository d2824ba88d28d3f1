"""Memory a policy or causal LM needs, estimated before anything starts (``embodied-rl plan``).

Weights, gradients and optimizer state are counted exactly: the policy is built on the meta device (no memory, no
initialisation), so every parameter's size, dtype and ``requires_grad`` are the run's. Activations are estimated
from the architecture: what autograd keeps for the backward pass of each transformer layer, per token (``e`` bytes
per element of the compute dtype, ``h`` width, ``i`` MLP width, ``a`` heads, ``s`` tokens of the sequence):

* pre-norm decoder layer (Llama, Qwen2, Gemma: RMSNorm, rotary, gated MLP): two RMSNorms keep a float32 copy of
  their input (Gemma: two) and their output (2 x (4h + e h)); attention keeps q, k, v (e (h + 2 h_kv)) and its
  output (e h), plus with eager attention the float32 softmax and its cast (a s (4 + e)); the gated MLP keeps gate,
  activation, up and their product (4 e i). LoRA adds only its rank-r intermediates (counted as zero).
* ViT encoder layer (SigLIP, DINOv2: LayerNorm, GELU MLP): 2 e h (norms) + 3 e h (q, k, v) + e h (output) + 2 e i.
* a frozen tower whose input needs no gradient (the vision tower under LoRA) keeps nothing.

With activation checkpointing a stack keeps each layer's input (e h per token) plus one layer's activations while
it is recomputed. These formulas are checked against the bytes autograd actually saves for the tiny and small
policies and LMs on CPU (tests/models/test_models_memory.py) and against peak GPU memory (docs/results.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GIB = 2 ** 30


@dataclass
class Stack:
    """A stack of transformer layers as one forward pass sees it: ``tokens`` per sample, ``kind`` 'decoder' or
    'encoder', ``trained``: whether a gradient flows through it (else it keeps no activations)."""

    name: str
    kind: str
    layers: int
    tokens: int
    width: int
    mlp: int
    heads: int
    kv_width: int
    trained: bool = True
    attention: str = "sdpa"
    norm_copies: int = 1
    """Float32 copies an RMSNorm keeps beside its output: 1 for Llama/Qwen2 (the weight multiplies the cast output),
    2 for Gemma (it normalises and weights in float32)."""
    context: int = 0
    """Keys each token attends to beyond its own sequence (Pi0's action expert attends to the cached prefix; the
    cache's keys and values, concatenated with the sequence's, are kept once per layer)."""

    def token_bytes(self, e: int) -> float:
        """Bytes one token keeps in one layer for the backward pass."""
        h, i, keys = self.width, self.mlp, self.tokens + self.context
        scores = self.heads * keys * (4 + e) if self.attention == "eager" else 4 * self.heads
        if self.kind == "decoder":
            return 2 * (4 * self.norm_copies * h + e * h) + e * (h + 2 * self.kv_width) + e * h + scores + 4 * e * i
        return 2 * e * h + 3 * e * h + e * h + scores + 2 * e * i

    def activation_bytes(self, batch: int, e: int, checkpointing: bool = False) -> float:
        """Activations of ``batch`` samples kept for the backward pass."""
        if not self.trained:
            return 0.0
        # keys and values of the context, concatenated to the sequence's own in every layer (a KV cache's update)
        per_layer = self.token_bytes(e) * self.tokens * batch + 2 * e * self.kv_width * self.context * batch
        if checkpointing:
            return self.layers * e * self.width * self.tokens * batch + per_layer
        return self.layers * per_layer


@dataclass
class Parameters:
    """Exact sizes of a model's parameters: trained (float32 master weights here) and frozen, in bytes."""

    count: int
    trained_count: int
    trained_bytes: int
    frozen_bytes: int

    @classmethod
    def of(cls, module: torch.nn.Module) -> "Parameters":
        trained = [p for p in module.parameters() if p.requires_grad]
        frozen = [p for p in module.parameters() if not p.requires_grad]
        return cls(sum(p.numel() for p in module.parameters()), sum(p.numel() for p in trained),
                   sum(p.numel() * p.element_size() for p in trained),
                   sum(p.numel() * p.element_size() for p in frozen))

    @property
    def weight_bytes(self) -> int:
        return self.trained_bytes + self.frozen_bytes

    def adam_bytes(self) -> int:
        """Adam's two moments, in the trained weights' dtype."""
        return 2 * self.trained_bytes


def meta_policy(spec: dict) -> torch.nn.Module:
    """The policy ``build_policy(**spec)`` builds, on the meta device: shapes and dtypes, no memory."""
    from embodied_rl.models import build_policy

    with torch.device("meta"):
        return build_policy(**spec)


def policy_stacks(policy, attention: str | None = None) -> list[Stack]:
    """The transformer stacks one ``evaluate`` of ``policy`` runs, per sample (none for the MLP/CNN policies)."""
    from embodied_rl.models.openvla.policy import OpenVLAPolicy
    from embodied_rl.models.pi0.policy import Pi0Policy

    if isinstance(policy, OpenVLAPolicy):
        return _openvla_stacks(policy, attention)
    if isinstance(policy, Pi0Policy):
        return _pi0_stacks(policy, attention)
    return []


def _trains(module: torch.nn.Module) -> bool:
    return any(p.requires_grad for p in module.parameters())


def _openvla_stacks(policy, attention: str | None) -> list[Stack]:
    vision, language = policy.config.vision, policy.config.language
    per_image = (vision.image_size // vision.patch_size) ** 2
    patches = per_image * policy.cameras  # every camera's patches go to the LM
    tower_trained = _trains(policy.vision_backbone)
    # the towers see each camera's image on its own: counted as one sequence of all of them (their terms are linear
    # in tokens with SDPA)
    stacks = [Stack("siglip", "encoder", vision.siglip_layers, patches, vision.siglip_width, vision.siglip_mlp,
                    vision.siglip_heads, vision.siglip_width, tower_trained)]
    if vision.fused:
        stacks.append(Stack("dinov2", "encoder", vision.dino_layers,
                            (per_image + 1 + vision.dino_registers) * policy.cameras, vision.dino_width,
                            vision.dino_mlp, vision.dino_heads, vision.dino_width, tower_trained))
    # the published layout: [BOS, patches, proprio, prompt, empty token, action positions (OFT: + stop token)]
    extra = int(policy.config.empty_token_id is not None) + int(policy.parallel_decoding)
    tokens = (patches + policy.config.max_instruction_tokens + int(policy.use_proprio) + policy.tokens_per_decision
              + extra)
    kv_width = language.width // language.heads * language.kv_heads
    stacks.append(Stack("language_model", "decoder", language.layers, tokens, language.width, language.mlp,
                        language.heads, kv_width, True, attention or policy.language_model.config._attn_implementation))
    return stacks


def _pi0_stacks(policy, attention: str | None) -> list[Stack]:
    config = policy.pi0.config
    vision, text, expert = config.vlm_config.vision_config, config.vlm_config.text_config, config.dit_config
    images = policy.cameras * policy.tokens_per_image
    prefix = images + policy.settings.max_text_tokens
    impl = attention or getattr(text, "_attn_implementation", None) or "sdpa"
    steps = policy.settings.num_denoising_steps  # the expert runs once per denoising step of the stored chain
    stacks = [Stack("siglip", "encoder", vision.num_hidden_layers, policy.tokens_per_image * policy.cameras,
                    vision.hidden_size, vision.intermediate_size, vision.num_attention_heads, vision.hidden_size,
                    _trains(policy.pi0.model.vlm.vision_tower) if hasattr(policy.pi0.model.vlm, "vision_tower")
                    else True),
              Stack("gemma", "decoder", text.num_hidden_layers, prefix, text.hidden_size, text.intermediate_size,
                    text.num_attention_heads, text.head_dim * text.num_key_value_heads, True, impl, norm_copies=2)]
    stacks += [Stack(f"expert_step_{k}", "decoder", expert.num_hidden_layers, policy.action_chunk,
                     expert.hidden_size, expert.intermediate_size, expert.num_attention_heads,
                     expert.head_dim * expert.num_key_value_heads, True, impl, norm_copies=2, context=prefix)
               for k in range(steps)]
    return stacks


def compute_bytes(policy) -> int:
    """Bytes per element of the policy's compute dtype."""
    return torch.empty((), dtype=getattr(policy, "compute_dtype", torch.float32)).element_size()


def inference_bytes(stacks: list[Stack], batch: int, e: int) -> float:
    """Peak activations of a forward pass without gradients: the widest layer's working set (its input, the
    attention's q/k/v/output and the MLP's intermediates) for ``batch`` samples; earlier layers' outputs are freed."""
    widest = max((s.tokens * batch * e * (4 * s.width + 3 * s.mlp) for s in stacks), default=0)
    return float(widest)


def saved_activation_bytes(module: torch.nn.Module, forward) -> tuple[object, int]:
    """``(forward(), bytes)``: run ``forward`` and measure what autograd keeps for the backward pass: the distinct
    storages of the tensors it saves, leaving out ``module``'s own parameters and buffers (counted as weights)."""
    own = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in own:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = forward()
    return result, sum(saved.values())
