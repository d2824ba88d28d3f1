"""The Prismatic / OpenVLA network from ``transformers`` modules: vision backbone (SigLIP, optionally fused with
DINOv2) -> MLP projector -> causal LM fed through ``inputs_embeds``. transformers is imported inside the
constructors, so importing this module stays cheap."""

from __future__ import annotations

import inspect

import torch
from torch import nn

from embodied_rl.models.openvla.configuration import LanguageConfig, OpenVLAConfig, VisionConfig

SIGLIP_MEAN, SIGLIP_STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class VisionBackbone(nn.Module):
    """Camera images -> patch features, Prismatic style.

    ``featurizer``: ``transformers.SiglipVisionModel`` (no pooling head); ``fused_featurizer`` (when
    ``config.fused``): ``transformers.Dinov2WithRegistersModel``. Each gives the hidden state of
    ``config.feature_layer`` (-2: the output of the second-to-last block, as Prismatic's
    ``get_intermediate_layers``), without class/register tokens; fused features are concatenated along channels,
    DINOv2's first (``[B, P, dino_width + siglip_width]``, Prismatic's order).
    """

    def __init__(self, config: VisionConfig):
        super().__init__()
        from transformers import SiglipVisionConfig, SiglipVisionModel

        self.config = config
        self.featurizer = SiglipVisionModel(SiglipVisionConfig(
            hidden_size=config.siglip_width, num_hidden_layers=config.siglip_layers,
            num_attention_heads=config.siglip_heads, intermediate_size=config.siglip_mlp,
            image_size=config.image_size, patch_size=config.patch_size, hidden_act="gelu_pytorch_tanh",
            layer_norm_eps=1e-6, vision_use_head=False))
        self.fused_featurizer = None
        if config.fused:
            from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersModel

            self.fused_featurizer = Dinov2WithRegistersModel(Dinov2WithRegistersConfig(
                hidden_size=config.dino_width, num_hidden_layers=config.dino_layers,
                num_attention_heads=config.dino_heads, mlp_ratio=config.dino_mlp // config.dino_width,
                image_size=config.image_size, patch_size=config.patch_size,
                num_register_tokens=config.dino_registers, layer_norm_eps=1e-6, layerscale_value=1.0))
            with torch.no_grad():  # timm's DINOv2 adds no position embedding to the class token
                self.fused_featurizer.embeddings.position_embeddings[:, 0].zero_()
        self.register_buffer("siglip_mean", torch.tensor(SIGLIP_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("siglip_std", torch.tensor(SIGLIP_STD).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("dino_mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("dino_std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    @property
    def width(self) -> int:
        return self.config.width

    def forward(self, rgb: torch.Tensor) -> torch.Tensor:
        """``rgb`` uint8 ``[B, H, W, 3 n]`` (channels last, n cameras) -> patch features ``[B, n P, width]``
        (each camera's P patches one after the other)."""
        batch, height, width, channels = rgb.shape
        cameras = channels // 3
        images = rgb.reshape(batch, height, width, cameras, 3).permute(0, 3, 4, 1, 2)
        images = images.reshape(batch * cameras, 3, height, width).float() / 255.0
        size = self.config.image_size
        if (height, width) != (size, size):
            images = nn.functional.interpolate(images, size=(size, size), mode="bilinear", align_corners=False,
                                               antialias=True)
        dtype = self.featurizer.embeddings.patch_embedding.weight.dtype
        siglip = ((images - self.siglip_mean) / self.siglip_std).to(dtype)
        features = self.featurizer(pixel_values=siglip, output_hidden_states=True)
        patches = features.hidden_states[self.config.feature_layer]
        if self.fused_featurizer is not None:
            dino = ((images - self.dino_mean) / self.dino_std).to(dtype)
            fused = self.fused_featurizer(pixel_values=dino, output_hidden_states=True)
            prefix = 1 + self.config.dino_registers
            # Prismatic's order: DINOv2 channels first, then SigLIP (its projector's fc1 expects that)
            patches = torch.cat([fused.hidden_states[self.config.feature_layer][:, prefix:], patches], dim=-1)
        return patches.reshape(batch, cameras * patches.shape[1], patches.shape[2])


class Projector(nn.Module):
    """Prismatic's ``gelu-mlp`` projector, patch features ``[..., vision_width]`` -> ``[..., llm_width]``:
    fc1 -> GELU -> fc2; for fused backbones fc1 (to 4 x vision_width) -> GELU -> fc2 -> GELU -> fc3."""

    def __init__(self, vision_width: int, llm_width: int, fused: bool):
        super().__init__()
        self.fused = fused
        if fused:
            self.fc1 = nn.Linear(vision_width, 4 * vision_width)
            self.fc2 = nn.Linear(4 * vision_width, llm_width)
            self.fc3 = nn.Linear(llm_width, llm_width)
        else:
            self.fc1 = nn.Linear(vision_width, llm_width)
            self.fc2 = nn.Linear(llm_width, llm_width)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.fc2(nn.functional.gelu(self.fc1(features)))
        return self.fc3(nn.functional.gelu(x)) if self.fused else x


class ProprioProjector(nn.Module):
    """OpenVLA-OFT's proprio projector: state ``[B, D]`` -> one token ``[B, llm_width]`` (fc1 -> GELU -> fc2)."""

    def __init__(self, state_dim: int, llm_width: int):
        super().__init__()
        self.fc1 = nn.Linear(state_dim, llm_width)
        self.fc2 = nn.Linear(llm_width, llm_width)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.fc1(state)))


def build_language_model(config: LanguageConfig) -> nn.Module:
    """A randomly initialised ``LlamaForCausalLM`` or ``Qwen2ForCausalLM`` of ``config``'s sizes (no download;
    SDPA attention (fused kernels where the device has them; the additive 4D mask of the action block is
    supported), untied embeddings as Llama-2)."""
    import transformers

    common = dict(vocab_size=config.vocab_size, hidden_size=config.width, intermediate_size=config.mlp,
                  num_hidden_layers=config.layers, num_attention_heads=config.heads,
                  num_key_value_heads=config.kv_heads, max_position_embeddings=config.max_positions,
                  rms_norm_eps=config.rms_norm_eps, rope_theta=config.rope_theta, tie_word_embeddings=False)
    if config.family == "qwen2":
        lm_config, cls = transformers.Qwen2Config(**common), transformers.Qwen2ForCausalLM
    else:
        lm_config, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    lm_config._attn_implementation = "sdpa"
    return cls(lm_config)


def language_model_text_config(config: LanguageConfig) -> dict:
    """The LM's ``transformers`` config as a dict (a published checkpoint's ``text_config``)."""
    return {"model_type": config.family, "vocab_size": config.vocab_size, "hidden_size": config.width,
            "intermediate_size": config.mlp, "num_hidden_layers": config.layers,
            "num_attention_heads": config.heads, "num_key_value_heads": config.kv_heads,
            "max_position_embeddings": config.max_positions, "rms_norm_eps": config.rms_norm_eps,
            "rope_theta": config.rope_theta, "tie_word_embeddings": False, "pad_token_id": None}


def cache_keyword(model: nn.Module) -> str:
    """transformers >= 5.2x names the KV cache argument ``cache``; older versions ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def attention_mask(valid: torch.Tensor, queries: int, bidirectional_from: int | None, dtype) -> torch.Tensor:
    """Additive attention mask ``[B, 1, queries, S]`` for the last ``queries`` of ``S`` positions: causal, keys
    where ``valid`` ``[B, S]`` is false masked out (left padding), each query always sees itself (no fully masked
    rows), and with ``bidirectional_from`` the positions from that index on see each other (0: the whole sequence,
    as OpenVLA-OFT's parallel decoding)."""
    keys = valid.shape[1]
    q = torch.arange(keys - queries, keys, device=valid.device)[:, None]
    k = torch.arange(keys, device=valid.device)[None, :]
    allowed = k <= q
    if bidirectional_from is not None:
        allowed = allowed | ((q >= bidirectional_from) & (k >= bidirectional_from))
    allowed = (allowed[None] & valid[:, None, :]) | (k == q)[None]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=valid.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


class LanguageModelRunner:
    """Runs the decoder of a causal LM (``language_model.model``) on embeddings with explicit masks and positions,
    optionally with a KV cache; returns the final (normed) hidden states ``[B, n, width]``."""

    def __init__(self, language_model: nn.Module):
        self.decoder = language_model.model
        self.cache_keyword = cache_keyword(self.decoder)

    def new_cache(self, language_model: nn.Module):
        from transformers import DynamicCache

        return DynamicCache(config=language_model.config)

    def __call__(self, embeds, mask, positions, cache=None) -> torch.Tensor:
        extra = {self.cache_keyword: cache, "use_cache": True} if cache is not None else {"use_cache": False}
        out = self.decoder(inputs_embeds=embeds, attention_mask=mask.to(embeds.dtype), position_ids=positions,
                           **extra)
        return out.last_hidden_state


def left_pad(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate ``(embeds [B, n_i, W], valid [B, n_i])`` parts along the sequence, then move each row's padding
    to its front (stable order otherwise), so every row's tokens end at the same index and their positions and
    results do not depend on the other rows. Returns embeds ``[B, S, W]`` and valid ``[B, S]``."""
    embeds = torch.cat([p[0] for p in parts], dim=1)
    valid = torch.cat([p[1] for p in parts], dim=1)
    order = torch.sort(valid.to(torch.int8), dim=1, stable=True).indices
    embeds = torch.gather(embeds, 1, order[..., None].expand_as(embeds))
    return embeds, torch.gather(valid, 1, order)


def positions(valid: torch.Tensor) -> torch.Tensor:
    """Position ids ``[B, S]`` of left-padded rows: 0 at each row's first valid token."""
    return (valid.long().cumsum(dim=1) - 1).clamp(min=0)


def build_network(config: OpenVLAConfig) -> tuple[VisionBackbone, Projector, nn.Module]:
    """The three published parts for ``config``: vision backbone, projector, language model."""
    vision = VisionBackbone(config.vision)
    projector = Projector(config.vision.width, config.language.width, config.vision.fused)
    return vision, projector, build_language_model(config.language)
