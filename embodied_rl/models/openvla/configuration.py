"""Configuration of the OpenVLA / OpenVLA-OFT policies: plain dataclasses (no transformers import), with a ``tiny``
preset that runs on a laptop CPU and a ``full`` preset with the published OpenVLA-7B sizes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SIZES = ("tiny", "full")
"""Values of the ``size`` option."""

LANGUAGE_FAMILIES = ("llama", "qwen2")
"""Causal LM families the language model may be built from (``LlamaForCausalLM``, ``Qwen2ForCausalLM``)."""

N_ACTION_BINS = 256
"""OpenVLA's number of action bins (the last 256 ids of the tokenizer's vocabulary)."""

LLAMA2_EMPTY_TOKEN, LLAMA2_STOP_TOKEN = 29871, 2
"""Llama-2's empty piece ``'▁'`` (OpenVLA appends it after ``Out:``) and ``'</s>'`` (OFT's stop token)."""
BYTE_SPACE_TOKEN = 3 + ord(" ")
"""The byte tokenizer's id of a space: the tiny models' stand-in for Llama-2's empty piece."""
PROPRIO_NORMALIZATIONS = ("mean_std", "bounds_q99")
"""How the state is normalised before the proprio projector: ``mean_std`` (``(x - mean) / std``, statistics from
demonstrations) or ``bounds_q99`` (OFT's LIBERO default: ``clip(2 (x - q01) / (q99 - q01) - 1, -1, 1)``)."""


def invalid_option(key: str, value, allowed) -> ValueError:
    """The one error message for a bad option: the key, the value given and the allowed values."""
    return ValueError(f"openvla option {key}={value!r} is not allowed; allowed values: "
                      f"{', '.join(repr(a) for a in allowed)}")


@dataclass
class VisionConfig:
    """The vision backbone: a SigLIP ViT, optionally fused with a DINOv2 ViT (Prismatic's ``dinosiglip``)."""

    image_size: int = 32
    """Side of the square image both ViTs see (pixels); camera images are resized to it (bilinear)."""
    patch_size: int = 8
    """ViT patch side (pixels); the backbone gives ``(image_size // patch_size) ** 2`` patch tokens per camera."""
    siglip_width: int = 32
    """SigLIP hidden size (so400m: 1152)."""
    siglip_layers: int = 2
    """SigLIP transformer blocks (so400m: 27)."""
    siglip_heads: int = 2
    """SigLIP attention heads (so400m: 16)."""
    siglip_mlp: int = 64
    """SigLIP MLP width (so400m: 4304)."""
    fused: bool = False
    """Whether a DINOv2 ViT runs beside SigLIP; the two patch features are concatenated along channels
    (``[B, P, dino_width + siglip_width]``, DINOv2 first as Prismatic)."""
    dino_width: int = 32
    """DINOv2 hidden size (ViT-L/14: 1024)."""
    dino_layers: int = 2
    """DINOv2 transformer blocks (ViT-L/14: 24)."""
    dino_heads: int = 2
    """DINOv2 attention heads (ViT-L/14: 16)."""
    dino_mlp: int = 64
    """DINOv2 MLP width (ViT-L/14: 4096)."""
    dino_registers: int = 4
    """DINOv2 register tokens (the published ``vit_large_patch14_reg4_dinov2``: 4); dropped from the features."""
    feature_layer: int = -2
    """Which hidden state gives the patch features: Prismatic takes the output of the second-to-last block (-2)."""

    @property
    def patches(self) -> int:
        """Patch tokens per camera image."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def width(self) -> int:
        """Channels of the (fused) patch features."""
        return self.siglip_width + (self.dino_width if self.fused else 0)


@dataclass
class LanguageConfig:
    """The causal language model (Llama family, or Qwen2), fed through ``inputs_embeds``."""

    family: str = "llama"
    """``llama`` (OpenVLA: Llama-2) or ``qwen2`` (MiniVLA-style)."""
    width: int = 64
    """Hidden size (Llama-2-7B: 4096)."""
    layers: int = 2
    """Decoder layers (Llama-2-7B: 32)."""
    heads: int = 4
    """Attention heads (Llama-2-7B: 32)."""
    kv_heads: int = 4
    """Key/value heads (grouped-query attention; Llama-2-7B: 32)."""
    mlp: int = 128
    """MLP (gate/up) width (Llama-2-7B: 11008)."""
    vocab_size: int = 528
    """Rows of the embedding and LM head (Llama-2: 32000 padded to 32064). Tiny: the byte tokenizer's 259 ids, the
    256 action ids after them, padded to a multiple of 16."""
    tokenizer_vocab_size: int = 528
    """The tokenizer's vocabulary size; the action tokens are its last 256 ids (OpenVLA's ``ActionTokenizer`` uses
    ``tokenizer.vocab_size``: 32000 for Llama-2, below the 64 padding rows)."""
    max_positions: int = 2048
    """Maximum sequence length (rotary embeddings)."""
    rms_norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    rope_theta: float = 10000.0
    """Rotary embedding base."""


@dataclass
class OpenVLAConfig:
    """Everything that defines an OpenVLA / OpenVLA-OFT network."""

    vision: VisionConfig = field(default_factory=VisionConfig)
    """The vision backbone."""
    language: LanguageConfig = field(default_factory=LanguageConfig)
    """The language model."""
    n_action_bins: int = N_ACTION_BINS
    """Action bins (OpenVLA: 256, uniform over [-1, 1])."""
    max_instruction_tokens: int = 64
    """Instruction tokens kept (longer instructions are cut)."""
    prompt: str = "{instruction}"
    """Prompt template around the instruction; the full preset uses OpenVLA's
    ``In: What action should the robot take to {instruction}?\\nOut:``."""
    vision_backbone_id: str = "dinosiglip-vit-so-224px"
    """Prismatic's name of the vision backbone (written to a checkpoint's config.json)."""
    llm_backbone_id: str = "llama2-7b-pure"
    """Prismatic's name of the language model (written to a checkpoint's config.json)."""
    empty_token_id: int | None = BYTE_SPACE_TOKEN
    """Token appended to the prompt unless it already ends with it: OpenVLA's ``predict_action`` appends Llama-2's
    empty piece ``'▁'`` (29871) after ``Out:``, as in training. None: nothing appended. Tiny: the byte space."""
    stop_token_id: int = LLAMA2_STOP_TOKEN
    """OFT: the token after the action placeholders (Llama-2's ``'</s>'``; the byte tokenizer's eos is 2 too)."""
    proprio_normalization: str = "mean_std"
    """How the proprio state is normalised (``PROPRIO_NORMALIZATIONS``); a published OFT checkpoint whose
    ``norm_stats`` hold q01/q99 for ``proprio`` loads as ``bounds_q99``."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "OpenVLAConfig":
        values = dict(values)
        vision = VisionConfig(**values.pop("vision", {}))
        language = LanguageConfig(**values.pop("language", {}))
        return cls(vision=vision, language=language, **values)

    def validate(self) -> "OpenVLAConfig":
        if self.language.family not in LANGUAGE_FAMILIES:
            raise invalid_option("language.family", self.language.family, LANGUAGE_FAMILIES)
        if self.n_action_bins != N_ACTION_BINS:
            raise invalid_option("n_action_bins", self.n_action_bins, (N_ACTION_BINS,))
        if self.proprio_normalization not in PROPRIO_NORMALIZATIONS:
            raise invalid_option("proprio_normalization", self.proprio_normalization, PROPRIO_NORMALIZATIONS)
        if self.language.tokenizer_vocab_size > self.language.vocab_size:
            raise ValueError(f"openvla: tokenizer_vocab_size {self.language.tokenizer_vocab_size} exceeds the LM's "
                             f"vocab_size {self.language.vocab_size}")
        return self


def tiny() -> OpenVLAConfig:
    """SigLIP 2 blocks width 32 patch 8 on 32x32 images (16 patches), Llama 2 layers width 64, byte tokenizer:
    ~0.3 M parameters, a few ms per forward on one CPU thread."""
    return OpenVLAConfig(prompt="{instruction}", max_instruction_tokens=64)


def tiny_fused() -> OpenVLAConfig:
    """``tiny`` with a tiny DINOv2 fused beside SigLIP (Prismatic's dinosiglip layout)."""
    config = tiny()
    config.vision.fused = True
    return config


def full() -> OpenVLAConfig:
    """The published OpenVLA-7B: SigLIP so400m-patch14-224 + DINOv2 ViT-L/14 (4 registers) on 224x224 images (256
    patches), fused projector, Llama-2-7B (vocab 32000 padded to 32064). About 7.5 B parameters: ~15 GB of weights in
    bf16 (30 GB in fp32); LoRA training needs ~40-60 GB more for activations at batch 16. Never built in tests."""
    return OpenVLAConfig(
        vision=VisionConfig(image_size=224, patch_size=14, siglip_width=1152, siglip_layers=27, siglip_heads=16,
                            siglip_mlp=4304, fused=True, dino_width=1024, dino_layers=24, dino_heads=16,
                            dino_mlp=4096, dino_registers=4),
        language=LanguageConfig(family="llama", width=4096, layers=32, heads=32, kv_heads=32, mlp=11008,
                                vocab_size=32064, tokenizer_vocab_size=32000, max_positions=4096),
        max_instruction_tokens=64,
        prompt="In: What action should the robot take to {instruction}?\nOut:",
        empty_token_id=LLAMA2_EMPTY_TOKEN, stop_token_id=LLAMA2_STOP_TOKEN)


PRESETS = {"tiny": tiny, "full": full}


def preset(size: str) -> OpenVLAConfig:
    """The configuration of ``size`` (``tiny`` or ``full``); ValueError naming the allowed values otherwise."""
    if size not in PRESETS:
        raise invalid_option("size", size, SIZES)
    return PRESETS[size]()
