"""Sizes and sampling options of the Pi0 policy (``Pi0Settings``), with the ``tiny`` and ``full`` presets, and the
translation to transformers' ``PI0Config`` (imported lazily)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

SIZES = ("tiny", "full")
NOISE_MODES = ("sde", "flow_noise")
ACTION_NORMALIZATIONS = ("none", "mean_std", "quantile")
LOGP_DIMS = ("action", "all")
DTYPES = ("float32", "bfloat16", "float16")
INITIAL_NOISES = ("gaussian", "zero")
ONE_RANDOM = "one_random"
"""``stochastic_steps`` value: one denoising step per decision, drawn at random, is stochastic."""


def _choice(key: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"pi0 option {key}={value!r} is not allowed; allowed values: {', '.join(map(repr, allowed))}")


def _at_least(key: str, value, low) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < low:
        raise ValueError(f"pi0 option {key}={value!r} is not allowed; allowed values: numbers >= {low}")


@dataclass
class Pi0Settings:
    """Everything that sizes the Pi0 network and shapes its sampling. ``tiny()`` / ``full()`` give the presets;
    ``dataclasses.replace`` overrides single fields; ``validate()`` raises ``ValueError`` naming the bad key."""

    # --- vision tower (SigLIP) ---
    image_size: int = 32
    """Side of the square image SigLIP sees; camera images are resized to it (bilinear)."""
    patch_size: int = 8
    """SigLIP patch side; each camera gives ``(image_size / patch_size)**2`` prefix tokens."""
    vision_width: int = 32
    """SigLIP hidden size."""
    vision_layers: int = 1
    """SigLIP encoder layers."""
    vision_heads: int = 2
    """SigLIP attention heads."""
    vision_intermediate: int = 64
    """SigLIP MLP width."""
    # --- prefix language model (Gemma of PaliGemma) ---
    text_width: int = 64
    """Gemma hidden size of the prefix model (also PaliGemma's projection_dim / hidden_size)."""
    layers: int = 2
    """Gemma layers, shared by prefix model and action expert (the expert attends layer by layer to the prefix
    cache, so both need the same layer count, heads, kv heads and head_dim)."""
    heads: int = 4
    """Attention heads (prefix and expert)."""
    kv_heads: int = 1
    """Key/value heads (prefix and expert)."""
    head_dim: int = 16
    """Width of one attention head (prefix and expert)."""
    text_intermediate: int = 128
    """Gemma MLP width of the prefix model."""
    vocab_size: int = 260
    """Text vocabulary; at least ``text_tokenizer.BYTE_VOCAB_SIZE`` + 1 for the byte tokenizer."""
    image_token_id: int = 259
    """Id of the placeholder token that image features replace."""
    # --- action expert (Gemma) ---
    expert_width: int = 32
    """Hidden size of the action expert (even)."""
    expert_intermediate: int = 64
    """MLP width of the action expert."""
    # --- inputs and outputs ---
    max_state_dim: int = 0
    """State width the model takes (states are zero-padded to it); 0: the env's state width (at least 1)."""
    max_action_dim: int = 0
    """Action width the model generates (env actions are zero-padded to it); 0: the env's action width."""
    max_text_tokens: int = 48
    """Instruction tokens kept (bos, the text, a newline), cut beyond."""
    tokenizer: str = "byte"
    """``"byte"``: ``ByteTokenizer``; ``"pretrained"``: the tokenizer files of the checkpoint directory."""
    # --- sampling and log-probs ---
    num_denoising_steps: int = 10
    """Euler steps from t=1 (noise) to t=0 (actions): ``dt = -1 / num_denoising_steps``."""
    noise_mode: str = "sde"
    """``"sde"``: Flow-SDE (fixed ``noise_level``, drift-corrected mean, same marginals as the ODE);
    ``"flow_noise"``: ODE mean plus a learned std (``noise_head`` on the expert output, Flow-Noise)."""
    noise_level: float = 0.5
    """Flow-SDE ``a`` in ``sigma_t = a * sqrt(t / (1 - t))``."""
    sigma_clamp_time: float = 0.0
    """``t`` is clamped to at most this value inside ``sigma_t``; 0: ``1 - 1/num_denoising_steps`` (the second
    step's time, as Flow-GRPO does)."""
    flow_noise_min: float = 0.05
    """Flow-Noise: smallest std per unit ``sqrt(|dt|)``."""
    flow_noise_max: float = 0.5
    """Flow-Noise: largest std per unit ``sqrt(|dt|)``."""
    stochastic_steps: tuple | str | None = None
    """Indices (0 = the step from t=1) of the denoising steps that draw noise and enter the log-prob; None: all;
    ``"one_random"``: one step per decision, drawn uniformly from all of them and stored with the chain (piRL's
    Flow-SDE: a decision's log-prob is then one Gaussian transition, its ratio one step's). The other steps are
    plain ODE steps."""
    initial_noise: str = "gaussian"
    """Where a sampled chain starts: ``"gaussian"`` ``x_1 ~ N(0, I)`` (flow matching's sampler); ``"zero"``
    ``x_1 = 0``, as the deterministic policy does, so the stochastic steps are the policy's only randomness. With
    one stochastic step per decision most of a group's spread in outcomes otherwise comes from ``x_1``, which the
    log-prob does not see: GRPO then credits that step's noise with luck it did not cause."""
    logp_dims: str = "action"
    """Dimensions summed into the log-prob and entropy: ``"action"`` the env's action dims, ``"all"`` also the
    padding dims up to ``max_action_dim``."""
    action_normalization: str = "none"
    """How ``set_action_statistics`` maps env actions to model space: ``"mean_std"`` or ``"quantile"`` (q01/q99 to
    [-1, 1]); ``"none"``: identity (statistics are ignored)."""
    critic_detach: bool = True
    """Value head reads detached prefix features (the value loss does not move the VLM)."""
    dtype: str = "float32"
    """Weights' dtype (``"bfloat16"`` on GPU); the chain and log-probs are always float32."""
    lora_rank: int = 0
    """LoRA rank on the Gemma projections of prefix model and expert (0: full fine-tuning)."""
    lora_alpha: float = 0.0
    """LoRA alpha; 0: ``2 * lora_rank``."""
    train_expert_only: bool = False
    """Freeze the VLM (PaliGemma: the SigLIP vision tower, its projector and the Gemma prefix model, with their LoRA
    adapters) and train only the action expert, its action / state / time projections, ``critic_head`` and
    ``noise_head`` (RLinf's ``train_expert_only``); the prefix then runs without autograd (no activations kept)."""

    @classmethod
    def tiny(cls, **overrides) -> "Pi0Settings":
        """A few hundred thousand parameters: SigLIP 1 layer width 32 on 32x32 images (16 tokens per camera),
        Gemma 2 layers width 64, expert width 32. Tens of ms per act on a laptop CPU."""
        return dataclasses.replace(cls(), **overrides)

    @classmethod
    def full(cls, **overrides) -> "Pi0Settings":
        """The published Pi0 sizes: PaliGemma-3B prefix (SigLIP So400m/14 at 224, 256 tokens per camera, Gemma-2B
        18 layers width 2048, 8 heads, 1 kv head, head_dim 256, vocab 257152) and a Gemma-300M action expert
        (width 1024, MLP 4096), 32 state / action dims. About 3.3e9 parameters: ~6.6 GB of weights in bf16,
        ~13 GB in fp32; full fine-tuning with Adam in fp32 needs ~55 GB plus activations (one 80 GB GPU, or
        LoRA: weights + a few hundred MB). Never built in the tests."""
        base = cls(image_size=224, patch_size=14, vision_width=1152, vision_layers=27, vision_heads=16,
                   vision_intermediate=4304, text_width=2048, layers=18, heads=8, kv_heads=1, head_dim=256,
                   text_intermediate=16384, vocab_size=257152, image_token_id=257152, expert_width=1024,
                   expert_intermediate=4096, max_state_dim=32, max_action_dim=32, tokenizer="pretrained")
        return dataclasses.replace(base, **overrides)

    @classmethod
    def preset(cls, size: str, **overrides) -> "Pi0Settings":
        _choice("size", size, SIZES)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"pi0 options {unknown} are unknown; allowed keys: {', '.join(sorted(names))}")
        return getattr(cls, size)(**overrides).validate()

    def validate(self) -> "Pi0Settings":
        _choice("noise_mode", self.noise_mode, NOISE_MODES)
        _choice("action_normalization", self.action_normalization, ACTION_NORMALIZATIONS)
        _choice("logp_dims", self.logp_dims, LOGP_DIMS)
        _choice("initial_noise", self.initial_noise, INITIAL_NOISES)
        _choice("dtype", self.dtype, DTYPES)
        _choice("tokenizer", self.tokenizer, ("byte", "pretrained"))
        if not isinstance(self.train_expert_only, bool):
            raise ValueError(f"pi0 option train_expert_only={self.train_expert_only!r} is not allowed; allowed "
                             "values: true (train the action expert, the VLM frozen), false")
        for key in ("num_denoising_steps", "image_size", "patch_size", "layers", "heads", "kv_heads", "head_dim",
                    "max_text_tokens", "vision_layers", "vision_heads"):
            _at_least(key, getattr(self, key), 1)
        if not isinstance(self.noise_level, (int, float)) or self.noise_level <= 0:
            raise ValueError(f"pi0 option noise_level={self.noise_level!r} is not allowed; allowed values: numbers > 0")
        for key in ("lora_rank", "lora_alpha", "max_state_dim", "max_action_dim", "flow_noise_min",
                    "sigma_clamp_time"):
            _at_least(key, getattr(self, key), 0)
        if self.sigma_clamp_time >= 1:
            raise ValueError(f"pi0 option sigma_clamp_time={self.sigma_clamp_time!r} is not allowed; allowed "
                             "values: 0 (automatic) or numbers in (0, 1)")
        if self.flow_noise_max <= self.flow_noise_min:
            raise ValueError(f"pi0 option flow_noise_max={self.flow_noise_max!r} is not allowed; allowed values: "
                             f"numbers > flow_noise_min={self.flow_noise_min!r}")
        if self.expert_width % 2:
            raise ValueError(f"pi0 option expert_width={self.expert_width!r} is not allowed; allowed values: even")
        if self.image_size % self.patch_size:
            raise ValueError(f"pi0 option image_size={self.image_size!r} is not allowed; allowed values: multiples "
                             f"of patch_size={self.patch_size}")
        if self.stochastic_steps is not None and self.stochastic_steps != ONE_RANDOM:
            bad = isinstance(self.stochastic_steps, str)
            steps = () if bad else tuple(int(s) for s in self.stochastic_steps)
            if not steps or any(s < 0 or s >= self.num_denoising_steps for s in steps):
                raise ValueError(f"pi0 option stochastic_steps={self.stochastic_steps!r} is not allowed; allowed "
                                 f"values: None, {ONE_RANDOM!r}, or a non-empty list of step indices in "
                                 f"0..{self.num_denoising_steps - 1}")
            self.stochastic_steps = tuple(sorted(set(steps)))
        return self

    @property
    def sigma_time_limit(self) -> float:
        """The ``t`` at which ``sigma_t`` is clamped."""
        return self.sigma_clamp_time or 1.0 - 1.0 / self.num_denoising_steps

    @property
    def one_random_step(self) -> bool:
        """Whether each decision makes one randomly drawn denoising step stochastic."""
        return self.stochastic_steps == ONE_RANDOM

    def is_stochastic(self, step: int) -> bool:
        """Whether denoising step ``step`` is stochastic for every decision (with ``one_random_step``: for none
        of them as a rule; the policy picks each decision's step)."""
        return self.stochastic_steps is None or (not self.one_random_step and step in self.stochastic_steps)

    def to_transformers(self, chunk: int, state_dim: int, action_dim: int):
        """-> ``transformers.PI0Config`` for chunks of ``chunk`` actions, ``state_dim`` / ``action_dim`` wide."""
        from transformers import PI0Config

        text = dict(model_type="gemma", hidden_size=self.text_width, num_hidden_layers=self.layers,
                    intermediate_size=self.text_intermediate, num_attention_heads=self.heads,
                    num_key_value_heads=self.kv_heads, head_dim=self.head_dim, vocab_size=self.vocab_size)
        vision = dict(model_type="siglip_vision_model", hidden_size=self.vision_width,
                      intermediate_size=self.vision_intermediate, patch_size=self.patch_size,
                      image_size=self.image_size, num_hidden_layers=self.vision_layers,
                      num_attention_heads=self.vision_heads, vision_use_head=False)
        # PaliGemma needs projection_dim and hidden_size at the text width, else its image-token check misfires.
        vlm = dict(model_type="paligemma", text_config=text, vision_config=vision, projection_dim=self.text_width,
                   hidden_size=self.text_width, image_token_id=self.image_token_id)
        dit = dict(model_type="gemma", hidden_size=self.expert_width, num_hidden_layers=self.layers,
                   intermediate_size=self.expert_intermediate, num_attention_heads=self.heads,
                   num_key_value_heads=self.kv_heads, head_dim=self.head_dim)
        return PI0Config(vlm_config=vlm, dit_config=dit, chunk_size=int(chunk), max_state_dim=int(state_dim),
                         max_action_dim=int(action_dim), num_inference_steps=self.num_denoising_steps)
