"""The registered ``"pi0"`` policy: transformers' PI0 (PaliGemma prefix + Gemma action expert, flow matching) with
Flow-SDE sampling, so each decision has a tractable log-prob for PPO / GRPO (as in piRL and Flow-GRPO)."""

from __future__ import annotations


import numpy as np
import torch
from torch import nn

from embodied_rl.models.openvla.modeling import cache_keyword
from embodied_rl.models.policy import Policy, built_in, in_compute_dtype, mlp
from embodied_rl.models.outputs import STORED_PREFIX
from embodied_rl.models.pi0 import flow_sde
from embodied_rl.models.pi0.configuration import SIZES, Pi0Settings
from embodied_rl.models.registry import POLICIES
from embodied_rl.models.text_tokenizer import BYTE_VOCAB_SIZE, ByteTokenizer, PretrainedTokenizer, encode_batch

CHAIN_KEY = STORED_PREFIX + "chain"
SDE_STEP_KEY = STORED_PREFIX + "sde_step"
"""What ``act`` stores with ``stochastic_steps="one_random"``: each decision's stochastic step index ``[B]`` int64."""
TOKEN_LOGP_KEY = STORED_PREFIX + "token_logp"
"""What ``act`` also stores: the log-prob of each Gaussian coordinate of the chain ``[B, M]`` (token-level ratios,
``algorithm.ratio_level=token``)."""
LORA_TARGETS = (r".*\.(language_model|dit)\.layers\.\d+\."
                r"(self_attn\.(q_proj|k_proj|v_proj|o_proj)|mlp\.(gate_proj|up_proj|down_proj))")
"""Regex of the modules LoRA adapts: every Gemma projection of the prefix model and the action expert (not
SigLIP)."""
ACTION_HEADS = ("pi0.embed_action_time.", "pi0.action_out_proj.")
"""Small action in/out projections that stay trainable beside LoRA."""


@POLICIES.register("pi0")
class Pi0Policy(Policy):
    """Pi0 vision-language-action policy with Flow-SDE log-probs.

    obs: ``"rgb"`` uint8 ``[B, H, W, C]`` (C = 3 x cameras, channels last), optional ``"state"`` float32 ``[B, D]``,
    optional ``"instruction"`` numpy strings ``[B]`` (absent: ""), plus ``"stored.chain"`` for ``evaluate``.

    Normalisation: the model sees ``(state - state_mean) / state_std`` and produces actions in the space of
    ``(action - action_offset) / action_scale``; a checkpoint's published statistics (transformers' PI0Processor or
    openpi's norm_stats, ``normalization.py``) set them, else ``set_observation_normalization`` /
    ``set_action_statistics`` from demonstrations.

    Prefix: each camera image is resized (bilinear, antialiased) to the SigLIP size and scaled to [-1, 1]; the
    prompt is ``<image> x (tokens per camera x cameras), bos, instruction, "\\n"`` (right-padded, masked: a row does
    not depend on other rows' instruction lengths). The state, normalised by ``state_mean`` / ``state_std``, is
    zero-padded to the model's state width. The action expert predicts the velocity of the noisy chunk
    ``x_t`` ``[B, K, A_model]`` (actions normalised by ``set_action_statistics``, zero-padded to ``A_model``).

    Sampling (``act``): ``x_1 ~ N(0, I)`` (zeros when deterministic or ``initial_noise="zero"``), then
    ``S = num_denoising_steps`` Euler steps ``t = 1 - i / S -> t - 1 / S``. A stochastic step
    (``stochastic_steps``, default all) is the Gaussian transition of ``flow_sde`` (Flow-SDE drift-corrected mean,
    std ``sigma_t sqrt(|dt|)``; or with ``noise_mode="flow_noise"`` the ODE mean and a learned std); the other steps
    are plain ODE steps. The chain ``x_1, ..., x_0`` (``[B, S+1, K, A_model]``, float32, unclipped) is returned as
    ``stored["stored.chain"]``; the action is ``x_0``, unnormalised. Deterministic mode runs the ODE from zeros (no noise at all).

    Log-prob of a decision = the sum over stochastic steps, chunk steps and the summed dims (``logp_dims``:
    the env's action dims, or all ``A_model``) of the transitions' Gaussian log-densities ``log N(x_{i+1};
    mean_theta(x_i, t_i), std_i^2)``; the prior of ``x_1`` and the ODE steps add nothing (both are free of the
    weights given the chain). ``evaluate`` recomputes the same sum from the stored chain with the current weights.
    Entropy = the sum of the same transitions' Gaussian entropies (the entropy of the chain given its
    predecessors; a constant of the weights under Flow-SDE, learned under Flow-Noise).

    Value: ``critic_head`` (MLP over ``hidden_sizes``) on the masked mean of the prefix model's last hidden
    states (detached when ``critic_detach``) concatenated with the normalised state.
    """

    observation_modes = ("rgb",)
    sizes = SIZES

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes=(64,), init_log_std: float = -0.5,
                 obs_shapes: dict | None = None, action_chunk: int = 1, size: str = "tiny",
                 checkpoint: str | None = None, num_denoising_steps: int = 10, noise_level: float = 0.5,
                 noise_mode: str = "sde", stochastic_steps=None, lora_rank: int = 0,
                 action_normalization: str = "none", logp_dims: str = "action", critic_detach: bool = True,
                 dtype: str = "float32", initial_noise: str = "gaussian", train_expert_only: bool = False,
                 settings: dict | None = None):
        super().__init__()
        if not obs_shapes or "rgb" not in obs_shapes or len(obs_shapes["rgb"]) != 3 or int(obs_shapes["rgb"][2]) % 3:
            raise ValueError(f"pi0 option obs_shapes={obs_shapes!r} is not allowed; allowed values: a dict with "
                             "'rgb': [H, W, C], C a multiple of 3 (env.obs_mode=rgb)")
        if int(action_chunk) < 1:
            raise ValueError(f"pi0 option action_chunk={action_chunk!r} is not allowed; allowed values: integers >= 1")
        overrides = dict(settings or {})
        overrides.update(num_denoising_steps=num_denoising_steps, noise_level=noise_level, noise_mode=noise_mode,
                         stochastic_steps=stochastic_steps, lora_rank=lora_rank, logp_dims=logp_dims,
                         action_normalization=action_normalization, critic_detach=critic_detach, dtype=dtype,
                         initial_noise=initial_noise, train_expert_only=train_expert_only)
        self.settings = Pi0Settings.preset(size, **overrides)
        self.state_dim, self.action_dim, self.action_chunk = int(obs_dim), int(action_dim), int(action_chunk)
        self.cameras = int(obs_shapes["rgb"][2]) // 3
        self.checkpoint = checkpoint
        torch_dtype = self.compute_dtype = getattr(torch, self.settings.dtype)
        if checkpoint:
            from embodied_rl.models.pi0.checkpoint import load_pi0_model, has_tokenizer

            self.pi0 = load_pi0_model(checkpoint, self.action_chunk, torch_dtype)
            use_pretrained = has_tokenizer(checkpoint)
        else:
            self.settings.validate()
            if self.settings.tokenizer == "byte" and self.settings.vocab_size < BYTE_VOCAB_SIZE:
                raise ValueError(f"pi0 option vocab_size={self.settings.vocab_size!r} is not allowed; allowed "
                                 f"values: >= {BYTE_VOCAB_SIZE} with the byte tokenizer")
            state_width = self.settings.max_state_dim or max(self.state_dim, 1)
            action_width = self.settings.max_action_dim or self.action_dim
            from transformers import PI0ForConditionalGeneration

            config = self.settings.to_transformers(self.action_chunk, state_width, action_width)
            with built_in(torch_dtype):
                self.pi0 = PI0ForConditionalGeneration(config).to(torch_dtype)
            use_pretrained = False
        config = self.pi0.config
        self.model_state_dim, self.model_action_dim = int(config.max_state_dim), int(config.max_action_dim)
        if self.state_dim > self.model_state_dim or self.action_dim > self.model_action_dim:
            raise ValueError(f"pi0: state ({self.state_dim}) / action ({self.action_dim}) dims exceed the model's "
                             f"max_state_dim={self.model_state_dim} / max_action_dim={self.model_action_dim}")
        vision = config.vlm_config.vision_config
        self.image_size = int(vision.image_size)
        self.tokens_per_image = (self.image_size // int(vision.patch_size)) ** 2
        self.image_token_id = int(config.vlm_config.image_token_id)
        self.tokenizer = PretrainedTokenizer(checkpoint) if use_pretrained else ByteTokenizer()
        text_width = int(config.vlm_config.text_config.hidden_size)
        expert_width = int(config.dit_config.hidden_size)

        self.critic_head = mlp([text_width + self.state_dim, *list(hidden_sizes), 1], out_gain=1.0)
        self.noise_head = None
        if self.settings.noise_mode == "flow_noise":
            self.noise_head = nn.Linear(expert_width, self.model_action_dim)
            nn.init.zeros_(self.noise_head.weight)
            nn.init.zeros_(self.noise_head.bias)
        self.register_buffer("state_mean", torch.zeros(self.state_dim))
        self.register_buffer("state_std", torch.ones(self.state_dim))
        self.register_buffer("action_offset", torch.zeros(self.action_dim))
        self.register_buffer("action_scale", torch.ones(self.action_dim))
        if checkpoint:
            from embodied_rl.models.pi0.checkpoint import load_side_state

            self._load_published_statistics(checkpoint)
            load_side_state(self, checkpoint)
        if self.settings.lora_rank:
            self._add_lora()
        if self.settings.train_expert_only:
            self.pi0.model.vlm.requires_grad_(False)
        self.keep_trained_weights_in_float32()

    # ----------------------------------------------------------------------------------------------- LoRA, weights
    def _add_lora(self) -> None:
        from peft import LoraConfig, inject_adapter_in_model

        rank = int(self.settings.lora_rank)
        lora = LoraConfig(r=rank, lora_alpha=self.settings.lora_alpha or 2 * rank, lora_dropout=0.0,
                          target_modules=LORA_TARGETS)
        inject_adapter_in_model(lora, self.pi0)
        for name, parameter in self.named_parameters():
            parameter.requires_grad_("lora_" in name or not name.startswith("pi0.") or name.startswith(ACTION_HEADS))

    def fsdp_units(self) -> list[nn.Module]:
        """The modules FSDP shards as groups of their own (``engines/training/data_parallel.py``): SigLIP's and the
        action expert's layers. The VLM's Gemma layers stay in the root group: their keys and values reach the
        action expert through the KV cache, a side path on which FSDP would free their weights before the backward
        pass needs them."""
        from embodied_rl.engines.training.data_parallel import transformer_blocks

        vlm = self.pi0.model.vlm.language_model
        inside = {id(m) for m in vlm.modules()}
        return [m for m in transformer_blocks(self) if id(m) not in inside]

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """What training changes: the parameters that require gradients (all of them without LoRA; with LoRA the
        adapters, the action in/out projections, ``critic_head`` and ``noise_head``) and the buffers (normalisation
        statistics), as in ``state_dict``."""
        state = self.state_dict()
        names = {n for n, p in self.named_parameters() if p.requires_grad} | {n for n, _ in self.named_buffers()}
        return {name: value for name, value in state.items() if name in names}

    def save_checkpoint(self, directory: str) -> None:
        """transformers' PI0 layout (LoRA merged) plus the side file; see ``checkpoint.save_checkpoint``."""
        from embodied_rl.models.pi0.checkpoint import save_checkpoint

        save_checkpoint(self, directory)

    # ------------------------------------------------------------------------------------------------ statistics
    def _load_published_statistics(self, checkpoint: str) -> None:
        """The checkpoint's published state / action statistics (``normalization.py``: transformers'
        ``processor_config.json`` or openpi's ``norm_stats.json``) into ``state_mean`` / ``state_std`` and
        ``action_offset`` / ``action_scale``, whatever ``action_normalization`` says (that option only governs
        statistics computed from demonstrations). Our own side file, loaded after, holds the same values."""
        from embodied_rl.models.pi0 import normalization

        stats = normalization.read_statistics(checkpoint)
        if "state" in stats and self.state_dim:
            mean, std = normalization.fit("state", stats["state"], self.state_dim)
            self.state_mean.copy_(mean)
            self.state_std.copy_(std)
        if "actions" in stats:
            offset, scale = normalization.fit("action", stats["actions"], self.action_dim)
            self.action_offset.copy_(offset)
            self.action_scale.copy_(scale)

    def set_observation_normalization(self, obs) -> None:
        """State mean / std from ``obs`` (a dict with ``"state"`` ``[N, D]``, or the array itself)."""
        if not self.state_dim:
            return
        state = obs["state"] if isinstance(obs, dict) else obs
        state = torch.as_tensor(np.array(state, dtype=np.float32)).reshape(-1, self.state_dim)
        self.state_mean.copy_(state.mean(dim=0))
        self.state_std.copy_(state.std(dim=0).clamp(min=1e-3))

    def set_action_statistics(self, actions) -> None:
        """Per-dim statistics of env actions ``[N, A]`` or ``[N, K, A]`` -> ``action_offset`` / ``action_scale``
        (model space = (action - offset) / scale): ``mean_std``: mean, std; ``quantile``: q01..q99 -> [-1, 1];
        ``none``: left at the identity."""
        mode = self.settings.action_normalization
        if mode == "none":
            return
        flat = torch.as_tensor(np.array(actions, dtype=np.float32)).reshape(-1, self.action_dim)
        if mode == "mean_std":
            offset, scale = flat.mean(0), flat.std(0)
        else:
            low, high = torch.quantile(flat, 0.01, dim=0), torch.quantile(flat, 0.99, dim=0)
            offset, scale = (high + low) / 2, (high - low) / 2
        self.action_offset.copy_(offset)
        self.action_scale.copy_(scale.clamp(min=1e-3))

    # --------------------------------------------------------------------------------------------------- network
    def _dtype(self) -> torch.dtype:
        return self.compute_dtype

    def _device(self) -> torch.device:
        return self.pi0.action_out_proj.weight.device

    def _pixels(self, rgb: torch.Tensor) -> torch.Tensor:
        """uint8 ``[B, H, W, 3 x cams]`` -> ``[B, cams, 3, S, S]`` in [-1, 1] (SigLIP's mean 0.5, std 0.5)."""
        batch, height, width, _ = rgb.shape
        images = rgb.to(self._device()).permute(0, 3, 1, 2).float().div(255.0)
        images = images.reshape(batch * self.cameras, 3, height, width)
        if (height, width) != (self.image_size, self.image_size):
            images = nn.functional.interpolate(images, size=(self.image_size, self.image_size), mode="bilinear",
                                               align_corners=False, antialias=True)
        images = images * 2.0 - 1.0
        return images.reshape(batch, self.cameras, 3, self.image_size, self.image_size).to(self._dtype())

    def _state(self, obs: dict, batch: int) -> torch.Tensor:
        """Normalised state zero-padded to the model width: ``[B, max_state_dim]``."""
        padded = torch.zeros(batch, self.model_state_dim, device=self._device())
        if self.state_dim and obs.get("state") is not None:
            state = torch.as_tensor(obs["state"], device=self._device()).float()
            padded[:, :self.state_dim] = (state - self.state_mean) / self.state_std
        return padded

    def _prefix(self, obs: dict):
        """Runs SigLIP + Gemma on images and prompt once (without autograd when ``train_expert_only``: nothing
        before the cache is trained). -> ``(cache, attention_mask [B, P], prefix_length, pooled [B, text_width],
        state [B, max_state_dim])``."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.settings.train_expert_only):
            return self._run_prefix(obs)

    @in_compute_dtype
    def _run_prefix(self, obs: dict):
        rgb = obs["rgb"]
        batch = rgb.shape[0]
        device = self._device()
        pixels = self._pixels(torch.as_tensor(rgb))
        texts = obs.get("instruction")
        texts = [""] * batch if texts is None else [str(t) for t in np.asarray(texts).reshape(-1)]
        texts = [t + "\n" for t in texts]  # PI0Processor.build_prompts: "<image>... <bos>{text}\n", "" when absent
        text_ids, text_mask = encode_batch(self.tokenizer, texts, self.settings.max_text_tokens)
        images = self.cameras * self.tokens_per_image
        input_ids = torch.cat([torch.full((batch, images), self.image_token_id, dtype=torch.long), text_ids], 1)
        mask = torch.cat([torch.ones(batch, images, dtype=torch.long), text_mask.long()], 1)
        input_ids, mask = input_ids.to(device), mask.to(device)
        camera_mask = torch.ones(batch, self.cameras, dtype=torch.bool, device=device)
        model = self.pi0.model
        embeds = model.embed_prefix(input_ids, pixels, camera_mask)
        out = model.vlm(inputs_embeds=embeds, attention_mask=mask, position_ids=mask.cumsum(-1) - 1,
                        token_type_ids=torch.zeros_like(mask), use_cache=True)
        cache = out.past_key_values if getattr(out, "cache", None) is None else out.cache
        weights = mask.unsqueeze(-1).to(out.last_hidden_state.dtype)
        pooled = (out.last_hidden_state * weights).sum(1) / weights.sum(1)
        return cache, mask, cache.get_seq_length(), pooled.float(), self._state(obs, batch)

    def _value(self, pooled: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        features = pooled.detach() if self.settings.critic_detach else pooled
        return self.critic_head(torch.cat([features, state[:, :self.state_dim]], -1)).squeeze(-1)

    @in_compute_dtype
    def _velocity(self, prefix, x: torch.Tensor, t) -> tuple[torch.Tensor, torch.Tensor]:
        """Velocity of the noisy chunk ``x`` ``[B, K, A_model]`` at time ``t`` (float or ``[B]``) ->
        ``(v [B, K, A_model] float32, expert hidden [B, K, expert_width])``."""
        cache, mask, prefix_length, _, state = prefix
        batch = x.shape[0]
        time = torch.as_tensor(t, dtype=torch.float32, device=x.device).expand(batch).contiguous()
        dtype = self._dtype()
        embeds = self.pi0.embed_action_time(state.to(dtype), x.to(dtype), time)
        out = self.pi0.model(action_embeds=embeds, attention_mask=mask, **{cache_keyword(self.pi0.model): cache})
        cache.crop(prefix_length - cache.get_seq_length())  # keep only the prefix: the next step does not see this one
        hidden = out.last_hidden_state[:, -self.action_chunk:]
        return self.pi0.action_out_proj(hidden).float(), hidden

    def _transition(self, x, v, hidden, t: float, dt: float):
        """Mean ``[B, K, A_model]`` and std (broadcastable) of the stochastic step from ``x`` at ``t``."""
        if self.noise_head is None:
            sigma = flow_sde.sde_sigma(t, self.settings.noise_level, self.settings.sigma_time_limit)
            mean, std = flow_sde.sde_step_mean_std(x, v, t, dt, sigma)
            return mean, (std.expand_as(mean) if isinstance(std, torch.Tensor) else torch.full_like(mean, std))
        low, high = self.settings.flow_noise_min, self.settings.flow_noise_max
        scale = low + (high - low) * torch.sigmoid(self.noise_head(hidden.to(self.noise_head.weight.dtype)).float())
        return flow_sde.flow_noise_mean_std(x, v, dt, scale)

    def _coordinates(self, values: torch.Tensor) -> torch.Tensor:
        """``[B, K, A_model]`` -> ``[B, K * A']``: the ``logp_dims`` coordinates of one step."""
        if self.settings.logp_dims == "action":
            values = values[..., :self.action_dim]
        return values.reshape(values.shape[0], -1)

    def _times(self):
        steps = self.settings.num_denoising_steps
        return [(i, 1.0 - i / steps, -1.0 / steps) for i in range(steps)]

    def _actions(self, x0: torch.Tensor) -> torch.Tensor:
        actions = x0[..., :self.action_dim] * self.action_scale + self.action_offset
        return actions if self.action_chunk > 1 else actions[:, 0]

    # ------------------------------------------------------------------------------------------------ the contract
    @torch.no_grad()
    def act(self, obs: dict, deterministic: bool = False):
        """obs -> ``(actions [B, K, A] ([B, A] when K = 1), logp [B], values [B], {"stored.chain":
        [B, S+1, K, A_model], "stored.token_logp": [B, M]}`` (with ``one_random`` also ``"stored.sde_step": [B]``)).
        ``deterministic``: the plain ODE from ``x_1 = 0``, no random draw (logp is still
        the chain's density under the stochastic transitions, so ``evaluate`` agrees)."""
        prefix = self._prefix(obs)
        batch = prefix[1].shape[0]
        shape = (batch, self.action_chunk, self.model_action_dim)
        from_zero = deterministic or self.settings.initial_noise == "zero"
        x = torch.zeros(shape, device=self._device()) if from_zero else torch.randn(shape).to(self._device())
        if self.settings.one_random_step:
            return self._act_one_random_step(prefix, x, deterministic)
        chain, token_logp = [x], []
        for step, t, dt in self._times():
            v, hidden = self._velocity(prefix, x, t)
            if self.settings.is_stochastic(step):
                mean, std = self._transition(x, v, hidden, t, dt)
                x = flow_sde.ode_step(x, v, dt) if deterministic else mean + std * torch.randn(shape).to(mean.device)
                token_logp.append(self._coordinates(flow_sde.gaussian_log_prob(x, mean, std)))
            else:
                x = flow_sde.ode_step(x, v, dt)
            chain.append(x)
        values = self._value(prefix[3], prefix[4])
        token_logp = torch.cat(token_logp, dim=-1) if token_logp else torch.zeros(batch, 0, device=x.device)
        stored = {CHAIN_KEY: torch.stack(chain, 1), TOKEN_LOGP_KEY: token_logp}
        return self._actions(x), token_logp.sum(-1), values, stored

    def _act_one_random_step(self, prefix, x: torch.Tensor, deterministic: bool):
        """``act`` with one stochastic step per decision: step ``k_b`` drawn uniformly for each row (stored as
        ``stored.sde_step``); the others are ODE steps. ``x``: ``x_1`` ``[B, K, A_model]``."""
        batch, steps = x.shape[0], self.settings.num_denoising_steps
        chosen = torch.randint(0, steps, (batch,)).to(x.device)
        token_logp = torch.zeros(batch, self._coordinates(x).shape[1], device=x.device)
        chain = [x]
        for step, t, dt in self._times():
            v, hidden = self._velocity(prefix, x, t)
            mean, std = self._transition(x, v, hidden, t, dt)
            here = chosen == step
            ode = flow_sde.ode_step(x, v, dt)
            if not deterministic:
                drawn = mean + std * torch.randn(x.shape).to(x.device)
                ode = torch.where(here[:, None, None], drawn, ode)
            x = ode
            logp = self._coordinates(flow_sde.gaussian_log_prob(x, mean, std))
            token_logp = torch.where(here[:, None], logp, token_logp)
            chain.append(x)
        values = self._value(prefix[3], prefix[4])
        stored = {CHAIN_KEY: torch.stack(chain, 1), TOKEN_LOGP_KEY: token_logp, SDE_STEP_KEY: chosen}
        return self._actions(x), token_logp.sum(-1), values, stored

    def _evaluate_one_random_step(self, obs: dict, prefix, chain: torch.Tensor):
        """``evaluate_tokens`` with one stochastic step per decision: one velocity pass, each row at its own stored
        step ``k_b`` (``t_b = 1 - k_b / S``). -> log-probs ``[B, K * A']``, entropies ``[B, K * A']``."""
        if SDE_STEP_KEY not in obs:
            raise ValueError(f"pi0 evaluate with stochastic_steps='one_random' needs obs[{SDE_STEP_KEY!r}]")
        steps = self.settings.num_denoising_steps
        chosen = torch.as_tensor(obs[SDE_STEP_KEY], device=chain.device).long()
        rows = torch.arange(len(chain), device=chain.device)
        x, following = chain[rows, chosen], chain[rows, chosen + 1]
        t = 1.0 - chosen.float() / steps
        v, hidden = self._velocity(prefix, x, t)
        mean, std = self._transition(x, v, hidden, t[:, None, None], -1.0 / steps)
        logp = self._coordinates(flow_sde.gaussian_log_prob(following, mean, std))
        return logp, self._coordinates(flow_sde.gaussian_entropy(std).expand_as(mean))

    def evaluate(self, obs: dict, actions: torch.Tensor | None = None):
        """Log-probs ``[B]``, entropies ``[B]`` and values ``[B]`` of the stored chains (``evaluate_tokens`` summed
        over each decision's Gaussian coordinates)."""
        logp, entropy, values = self.evaluate_tokens(obs, actions)
        return logp.sum(-1), entropy.sum(-1), values

    def evaluate_tokens(self, obs: dict, actions: torch.Tensor | None = None):
        """Per Gaussian coordinate of the chain (stochastic steps x K x the ``logp_dims``, M in all): log-probs
        ``[B, M]``, entropies ``[B, M]``, and values ``[B]``, of the decisions whose chains ``act`` stored in
        ``obs["stored.chain"]`` ``[B, S+1, K, A_model]``, under the current weights (``actions`` is the chain's
        last element, unnormalised; it is not needed)."""
        if CHAIN_KEY not in obs:
            raise ValueError(f"pi0 evaluate needs obs[{CHAIN_KEY!r}] (the denoising chain act returned)")
        prefix = self._prefix(obs)
        chain = torch.as_tensor(obs[CHAIN_KEY], device=self._device()).float()
        expected = (prefix[1].shape[0], self.settings.num_denoising_steps + 1, self.action_chunk,
                    self.model_action_dim)
        if tuple(chain.shape) != expected:
            raise ValueError(f"pi0 evaluate: {CHAIN_KEY} has shape {tuple(chain.shape)}, expected {expected}")
        if self.settings.one_random_step:
            logp, entropy = self._evaluate_one_random_step(obs, prefix, chain)
            return logp, entropy, self._value(prefix[3], prefix[4])
        logp, entropy = [], []
        for step, t, dt in self._times():
            if not self.settings.is_stochastic(step):
                continue
            x = chain[:, step]
            v, hidden = self._velocity(prefix, x, t)
            mean, std = self._transition(x, v, hidden, t, dt)
            logp.append(self._coordinates(flow_sde.gaussian_log_prob(chain[:, step + 1], mean, std)))
            entropy.append(self._coordinates(flow_sde.gaussian_entropy(std).expand_as(mean)))
        if not logp:
            logp = entropy = [torch.zeros(expected[0], 0, device=chain.device)]
        return torch.cat(logp, dim=-1), torch.cat(entropy, dim=-1), self._value(prefix[3], prefix[4])

    def value(self, obs: dict) -> torch.Tensor:
        """Values ``[B]``."""
        prefix = self._prefix(obs)
        return self._value(prefix[3], prefix[4])

    def supervised_loss(self, obs: dict, target_actions: torch.Tensor) -> torch.Tensor:
        """Pi0's flow-matching loss: ``t ~ Beta(1.5, 1) * 0.999 + 0.001``, noise ``~ N(0, I)`` (torch's global
        RNG), ``x_t = t noise + (1 - t) a``; mean squared error between the predicted velocity and ``noise - a``
        over ``[B, K, A_model]`` (``a``: targets ``[B, K, A]`` or ``[B, A]``, normalised, zero-padded)."""
        prefix = self._prefix(obs)
        batch = prefix[1].shape[0]
        device = self._device()
        target = torch.as_tensor(target_actions, device=device).float().reshape(batch, self.action_chunk,
                                                                                self.action_dim)
        target = (target - self.action_offset) / self.action_scale
        target = nn.functional.pad(target, (0, self.model_action_dim - self.action_dim))
        config = self.pi0.config
        beta = torch.distributions.Beta(torch.tensor(config.time_sampling_beta_alpha),
                                        torch.tensor(config.time_sampling_beta_beta))
        t = (beta.sample((batch,)) * config.time_sampling_scale + config.time_sampling_offset).to(device)
        noise = torch.randn(target.shape).to(device)
        x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * target
        v, _ = self._velocity(prefix, x_t, t)
        return nn.functional.mse_loss(v, noise - target)


def parameter_count(policy: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in policy.parameters() if p.requires_grad or not trainable_only)


__all__ = ["Pi0Policy", "CHAIN_KEY", "parameter_count"]
