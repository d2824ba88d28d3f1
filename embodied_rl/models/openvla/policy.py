"""The registered policies ``openvla`` (autoregressive action tokens, OpenVLA) and ``openvla_oft`` (parallel
decoding of a whole action chunk in one forward pass plus a proprio token, OpenVLA-OFT)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from embodied_rl.models.openvla.action_tokenizer import ActionTokenizer
from embodied_rl.models.openvla.configuration import SIZES, invalid_option, preset
from embodied_rl.models.policy import Policy, built_in, full_precision, in_compute_dtype, uninitialised
from embodied_rl.models.registry import POLICIES

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
STORED_TOKENS = "stored.action_tokens"
"""What ``act`` stores: the sampled action token ids ``[B, K * A]`` int64, so ``evaluate`` scores exactly them."""
STORED_TOKEN_LOGP = "stored.token_logp"
"""And their log-probs ``[B, K * A]`` float32 (token-level ratios, ``algorithm.ratio_level=token``)."""


def _critic_mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        linear = nn.Linear(sizes[i], sizes[i + 1])
        last = i == len(sizes) - 2
        nn.init.orthogonal_(linear.weight, 1.0 if last else math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers += [linear] if last else [linear, nn.Tanh()]
    return nn.Sequential(*layers)


class OpenVLAPolicy(Policy):
    """OpenVLA: camera image(s) + instruction (+ optionally the state) -> action tokens, one per action dimension,
    decoded autoregressively (``K * A`` tokens for a chunk of K actions of A dimensions).

    Network (Prismatic): ``vision_backbone`` (SigLIP, or SigLIP + DINOv2 fused) -> ``projector`` (GELU MLP) ->
    ``language_model`` (``LlamaForCausalLM`` / ``Qwen2ForCausalLM``) fed through ``inputs_embeds`` in the published
    order (``prompt.py``): ``[BOS, patch tokens (n_cameras x P), (proprio token), prompt tokens after BOS, empty
    token (Llama-2's 29871), action positions]``. The action token at position j is predicted by the hidden state
    one position earlier (causal next-token prediction; the first by the last prompt token). Each row's padding is
    moved to the front of its sequence (left padding, positions counted from its first real token), so a row's
    result does not depend on the other rows of the batch.

    Actions: OpenVLA's 256 bins over [-1, 1] on the last 256 ids of the tokenizer's vocabulary (``action_tokenizer``,
    with q01/q99 normalisation buffers). Sampling restricts the logits to those 256 ids (softmax over them only,
    at ``temperature``: an RL stage may sharpen what SFT learned, e.g. 0.5; rollout and update use the same
    distribution); ``deterministic`` takes the argmax. Log-prob of a decision = sum over its ``K * A`` tokens.

    Value head ``critic_head``: MLP (``hidden_sizes``, tanh) on the LM's last hidden state at the last prompt
    position, detached when ``critic_detach`` (default): the value loss then trains the head alone and cannot move
    the policy's trunk (RLinf's ``detach_critic_input``). ``lora_rank`` > 0: LoRA (peft) on the LM's attention and
    MLP projections; the LM and vision backbone are frozen, projectors, value head (and OFT's action queries) train.
    ``train_action_head_only`` (OFT's L1 head): only that head, its std and the value head train; the vision tower,
    projectors, LM and action queries are frozen (an RL stage that refines how the clone's features map to actions).

    obs: ``"rgb"`` uint8 ``[B, H, W, 3 n]``, ``"state"`` float32 ``[B, D]`` (optional), ``"instruction"`` numpy
    strings ``[B]`` (optional: ""), and ``"stored.action_tokens"`` int64 ``[B, K * A]`` at evaluate time.
    """

    observation_modes = ("rgb",)
    checkpointable_layers = True
    sizes = SIZES
    parallel_decoding = False
    default_proprio = False

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes=(256,), init_log_std: float = 0.0,
                 obs_shapes: dict | None = None, action_chunk: int = 1, size: str = "tiny",
                 checkpoint: str | None = None, lora_rank: int = 0, lora_alpha: float | None = None,
                 dtype: str = "float32", use_proprio: bool | None = None, fused_vision: bool | None = None,
                 unnorm_key: str | None = None, temperature: float = 1.0, critic_detach: bool = True,
                 action_head: str | None = None, std_from_residuals: bool = False, min_std: float | None = None,
                 std_scale: float = 1.0, train_action_head_only: bool = False):
        super().__init__()
        from embodied_rl.models.openvla import checkpoint as checkpoints
        from embodied_rl.models.openvla.modeling import LanguageModelRunner, ProprioProjector, build_network

        if size not in SIZES:
            raise invalid_option("size", size, SIZES)
        if dtype not in DTYPES:
            raise invalid_option("dtype", dtype, tuple(DTYPES))
        if not isinstance(lora_rank, int) or lora_rank < 0:
            raise ValueError(f"openvla option lora_rank={lora_rank!r} is not allowed; allowed values: an integer "
                             f">= 0 (0: no LoRA)")
        if not isinstance(temperature, (int, float)) or not temperature > 0:
            raise ValueError(f"openvla option temperature={temperature!r} is not allowed; allowed values: a number "
                             f"> 0 (1: the LM's own distribution)")
        self.temperature = float(temperature)
        if not isinstance(critic_detach, bool):
            raise ValueError(f"openvla option critic_detach={critic_detach!r} is not allowed; allowed values: true "
                             f"(the value loss trains only the value head) or false (it also reaches the LM, "
                             f"projectors and vision tower)")
        self.critic_detach = critic_detach
        if not isinstance(std_from_residuals, bool):
            raise ValueError(f"openvla option std_from_residuals={std_from_residuals!r} is not allowed; allowed "
                             f"values: true (SFT sets the L1 head's Gaussian std to its residuals) or false")
        self.std_from_residuals = std_from_residuals
        if min_std is not None and (isinstance(min_std, bool) or not isinstance(min_std, (int, float))
                                    or not min_std > 0):
            raise ValueError(f"openvla option min_std={min_std!r} is not allowed; allowed values: null or a number > 0 "
                             f"(the L1 head's Gaussian std never falls below it, in normalised action units)")
        self.min_log_std = None if min_std is None else math.log(float(min_std))
        if isinstance(std_scale, bool) or not isinstance(std_scale, (int, float)) or not std_scale > 0:
            raise ValueError(f"openvla option std_scale={std_scale!r} is not allowed; allowed values: a number > 0 "
                             f"(the L1 head's Gaussian std is this times the trained one, then floored at min_std)")
        self.log_std_shift = math.log(float(std_scale))
        if not isinstance(train_action_head_only, bool):
            raise ValueError(f"openvla option train_action_head_only={train_action_head_only!r} is not allowed; "
                             f"allowed values: true (only the L1 head, its std and the value head train) or false")
        if train_action_head_only and lora_rank:
            raise ValueError(f"openvla option train_action_head_only=true is not allowed with lora_rank={lora_rank}: "
                             f"it freezes the adapters too; allowed: one of them")
        self.train_action_head_only = train_action_head_only
        if int(action_chunk) < 1:
            raise ValueError(f"openvla option action_chunk={action_chunk!r} is not allowed; allowed values: an "
                             f"integer >= 1")
        if not obs_shapes or "rgb" not in obs_shapes or len(obs_shapes["rgb"]) != 3 or obs_shapes["rgb"][2] % 3:
            raise ValueError(f"openvla option obs_shapes={obs_shapes!r} is not allowed; allowed values: a dict with "
                             f"'rgb': [H, W, 3 x cameras] (env.obs_mode=rgb)")
        self.action_dim, self.action_chunk, self.state_dim = int(action_dim), int(action_chunk), int(obs_dim)
        self.cameras = int(obs_shapes["rgb"][2]) // 3
        self.size = size
        self.use_proprio = bool(self.default_proprio if use_proprio is None else use_proprio) and self.state_dim > 0

        loaded = None
        if checkpoint is not None:
            loaded = checkpoints.load_published_checkpoint(checkpoint, unnorm_key=unnorm_key)
            config = loaded.config
        else:
            config = preset(size)
            if fused_vision is not None:
                config.vision.fused = bool(fused_vision)
        self.config = config.validate()
        self.tokenizer = checkpoints.instruction_tokenizer(checkpoint, config)

        with built_in(DTYPES[dtype]), uninitialised(loaded is not None):  # a checkpoint fills every weight
            self.vision_backbone, self.projector, self.language_model = build_network(config)
        width = config.language.width
        self.proprio_projector = ProprioProjector(self.state_dim, width) if self.use_proprio else None
        self.action_queries = None
        if self.parallel_decoding:  # OFT feeds empty (zero) embeddings; a learned query per action position here
            self.action_queries = nn.Parameter(torch.randn(self.tokens_per_decision, width) * 0.02)
        self.critic_head = _critic_mlp([width, *hidden_sizes, 1])
        self.action_head, self.action_log_std = self._build_action_head(action_head, loaded, width, init_log_std)
        l1_head_only = {"std_from_residuals": std_from_residuals is True, "min_std": min_std is not None,
                        "std_scale": std_scale != 1, "train_action_head_only": train_action_head_only}
        if self.action_head is None and any(l1_head_only.values()):
            name = next(key for key, given in l1_head_only.items() if given)
            raise ValueError(f"openvla option {name} is not allowed with action tokens: it is an option of the L1 "
                             f"head; allowed: action_head=l1_regression (openvla_oft) or leave {name} unset")
        self.action_tokenizer = ActionTokenizer(action_dim, config.language.tokenizer_vocab_size,
                                                config.n_action_bins)
        self.register_buffer("state_mean", torch.zeros(self.state_dim))
        self.register_buffer("state_std", torch.ones(self.state_dim))
        if loaded is not None:
            checkpoints.apply_loaded(self, loaded)
        self.compute_dtype = DTYPES[dtype]
        for module in (self.vision_backbone, self.projector, self.language_model, self.proprio_projector,
                       self.critic_head, self.action_head):
            if module is not None:
                module.to(self.compute_dtype)
        if self.action_queries is not None:
            self.action_queries.data = self.action_queries.data.to(self.compute_dtype)
        self.lora_rank = lora_rank
        if lora_rank:
            self._add_lora(lora_rank, lora_alpha if lora_alpha is not None else min(lora_rank, 16))
        if train_action_head_only:
            self._freeze_all_but_the_heads()
        self.keep_trained_weights_in_float32()
        self.runner = LanguageModelRunner(self.language_model)

    # --- construction helpers ---------------------------------------------------------------------------------
    action_heads = ("tokens",)
    """Values of the ``action_head`` option: ``tokens`` (OpenVLA's 256 bins on the LM head)."""

    def _build_action_head(self, choice: str | None, loaded, width: int, init_log_std: float):
        """-> ``(action head module or None, its log-std parameter or None)``; OpenVLA decodes tokens only."""
        if choice not in (None, *self.action_heads):
            raise invalid_option("action_head", choice, self.action_heads)
        return None, None

    @property
    def tokens_per_decision(self) -> int:
        """``K * A``: action tokens of one decision."""
        return self.action_chunk * self.action_dim

    def _add_lora(self, rank: int, alpha: float) -> None:
        from peft import LoraConfig, inject_adapter_in_model

        inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0,
                                           target_modules=list(LORA_TARGETS)), self.language_model)
        for name, parameter in self.language_model.named_parameters():
            parameter.requires_grad = "lora_" in name
        for parameter in self.vision_backbone.parameters():
            parameter.requires_grad = False

    def _freeze_all_but_the_heads(self) -> None:
        """Only the L1 action head, its ``action_log_std`` and the value head keep training: the vision tower,
        projectors, LM and action queries are frozen (the counterpart of Pi0's ``train_expert_only``)."""
        for name, parameter in self.named_parameters():
            parameter.requires_grad = name.split(".")[0] in ("action_head", "action_log_std", "critic_head")

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """The entries of ``state_dict()`` training changes: parameters that require gradients (all of them
        without LoRA; with LoRA the adapters, projectors, value head) and the persistent buffers (normalisation
        statistics)."""
        names = {n for n, p in self.named_parameters() if p.requires_grad} | {n for n, _ in self.named_buffers()}
        return {k: v for k, v in self.state_dict().items() if k in names}

    # --- statistics -------------------------------------------------------------------------------------------
    def set_observation_normalization(self, obs) -> None:
        """State statistics from demonstrations (a dict with ``"state"`` ``[N, D]`` or the state array itself):
        mean/std, or with ``proprio_normalization=bounds_q99`` q01/q99 as the ``state_mean`` / ``state_std`` that
        map them to -1 / 1."""
        state = obs.get("state") if isinstance(obs, dict) else obs
        if state is None or self.state_dim == 0:
            return
        state = torch.as_tensor(np.array(state, dtype=np.float32)).reshape(-1, self.state_dim)
        if self.config.proprio_normalization == "bounds_q99":
            low, high = torch.quantile(state, 0.01, dim=0), torch.quantile(state, 0.99, dim=0)
            self.state_mean.copy_((low + high) / 2)
            self.state_std.copy_(((high - low) / 2).clamp(min=1e-3))
            return
        self.state_mean.copy_(state.mean(dim=0))
        self.state_std.copy_(state.std(dim=0).clamp(min=1e-3))

    def set_action_statistics(self, actions, mask=None) -> None:
        """q01/q99 action normalisation from demonstration actions ``[N, A]`` or ``[N, K, A]``."""
        self.action_tokenizer.set_statistics(actions, mask)

    # --- network pieces ---------------------------------------------------------------------------------------
    def _prompt(self, obs: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """obs -> left-padded prompt embeddings ``[B, S, W]`` and valid mask ``[B, S]``:
        ``[BOS, patches, (proprio token), prompt after BOS, empty token]`` (``prompt.py``; OFT's
        ``_process_proprio_features`` appends the proprio token to the patches)."""
        from embodied_rl.models.openvla.modeling import left_pad
        from embodied_rl.models.openvla.prompt import prompt_token_ids, with_patches

        rgb = obs["rgb"]
        batch, device = rgb.shape[0], rgb.device
        patches = self.projector(self.vision_backbone(rgb))
        texts = obs.get("instruction")
        texts = [""] * batch if texts is None else [str(t) for t in np.asarray(texts).reshape(-1)]
        texts = [self.config.prompt.format(instruction=t.lower() if self.config.prompt != "{instruction}" else t)
                 for t in texts]
        ids, mask = prompt_token_ids(self.tokenizer, texts, self.config.max_instruction_tokens,
                                     self.config.empty_token_id)
        ids, mask = ids.to(device), mask.to(device)
        text = self.language_model.get_input_embeddings()(ids)
        inserted = [(patches, torch.ones(patches.shape[:2], dtype=torch.bool, device=device))]
        if self.proprio_projector is not None:
            state = obs.get("state")  # absent: a zero state
            state = torch.zeros(batch, self.state_dim, device=device) if state is None else state.float()
            state = (state - self.state_mean) / self.state_std
            if self.config.proprio_normalization == "bounds_q99":
                state = state.clamp(-1.0, 1.0)
            token = self.proprio_projector(state.to(self.compute_dtype))[:, None]
            inserted.append((token, torch.ones(batch, 1, dtype=torch.bool, device=device)))
        return left_pad(with_patches((text, mask), inserted))

    @full_precision
    def _action_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states ``[B, n, W]`` -> logits over the 256 action ids ``[B, n, 256]`` float32, divided by the
        temperature (the policy's distribution, for sampling, log-probs and SFT alike)."""
        first, end = self.action_tokenizer.first_id, self.action_tokenizer.vocab_end
        weight = self.language_model.get_output_embeddings().weight[first:end]
        logits = hidden.float() @ weight.float().T
        return logits if self.temperature == 1.0 else logits / self.temperature

    def _value(self, hidden_last: torch.Tensor) -> torch.Tensor:
        features = hidden_last.detach() if self.critic_detach else hidden_last
        return self.critic_head(features).float().squeeze(-1)

    def _action_hidden(self, obs: dict, columns: torch.Tensor | None):
        """One forward pass of prompt plus action positions. -> the hidden states that predict the ``K * A`` action
        tokens ``[B, K * A, W]`` (each one position before its token: the last prompt token, then the action
        positions but the last) and the last prompt token's ``[B, W]`` (the value's input).

        Autoregressive: the action positions hold the embeddings of ``columns`` ``[B, K * A]`` but the last
        (teacher forcing), causal attention. Parallel (OFT's ``predict_action``): ``K * A`` placeholders (OFT: zero
        embeddings; here ``action_queries``, zeros when loaded from a published checkpoint) and the stop token
        follow the prompt, and attention is bidirectional over the whole sequence (the openvla-oft transformers
        fork), padding keys masked; the readout is shifted by one as in the autoregressive case."""
        from embodied_rl.models.openvla.modeling import attention_mask, positions

        embeds, valid = self._prompt(obs)
        prompt = embeds.shape[1]
        n = self.tokens_per_decision
        if self.parallel_decoding:
            queries = self.action_queries.to(embeds.dtype)[None].expand(len(embeds), n, -1)
            stop = torch.full((len(embeds), 1), self.config.stop_token_id, dtype=torch.long, device=embeds.device)
            actions = torch.cat([queries, self.language_model.get_input_embeddings()(stop).to(embeds.dtype)], 1)
            bidirectional = 0
        else:
            tokens = columns[:, :-1] + self.action_tokenizer.first_id
            actions = self.language_model.get_input_embeddings()(tokens)
            bidirectional = None
        embeds = torch.cat([embeds, actions], dim=1)
        valid = torch.cat([valid, torch.ones(actions.shape[:2], dtype=torch.bool, device=valid.device)], dim=1)
        mask = attention_mask(valid, embeds.shape[1], bidirectional, self.compute_dtype)
        hidden = self.runner(embeds, mask, positions(valid))
        return hidden[:, prompt - 1:prompt - 1 + n], hidden[:, prompt - 1]

    @in_compute_dtype
    def _forward(self, obs: dict, columns: torch.Tensor | None):
        """Action logits ``[B, K * A, 256]`` and values ``[B]`` (``_action_hidden``'s pass)."""
        hidden, last = self._action_hidden(obs, columns)
        return self._action_logits(hidden), self._value(last)

    @in_compute_dtype
    def _decode(self, obs: dict, deterministic: bool):
        """Autoregressive decoding with the KV cache: columns ``[B, K * A]``, token log-probs ``[B, K * A]``,
        values ``[B]``."""
        from embodied_rl.models.openvla.modeling import attention_mask, positions

        embeds, valid = self._prompt(obs)
        cache = self.runner.new_cache(self.language_model)
        position = positions(valid)
        mask = attention_mask(valid, embeds.shape[1], None, self.compute_dtype)
        hidden = self.runner(embeds, mask, position, cache)
        values = self._value(hidden[:, -1])
        position = position[:, -1:]
        columns, logps = [], []
        embed = self.language_model.get_input_embeddings()
        for j in range(self.tokens_per_decision):
            log_probs = torch.log_softmax(self._action_logits(hidden[:, -1]), dim=-1)  # [B, 256]
            column = self._choose(log_probs, deterministic)
            columns.append(column)
            logps.append(log_probs.gather(-1, column[:, None])[:, 0])
            if j == self.tokens_per_decision - 1:
                break
            valid = torch.cat([valid, torch.ones_like(valid[:, :1])], dim=1)
            position = position + 1
            token = embed(column[:, None] + self.action_tokenizer.first_id)
            hidden = self.runner(token, attention_mask(valid, 1, None, self.compute_dtype), position, cache)
        return torch.stack(columns, dim=1), torch.stack(logps, dim=1), values

    @staticmethod
    def _choose(log_probs: torch.Tensor, deterministic: bool) -> torch.Tensor:
        """``[..., 256]`` log-probs -> columns ``[...]`` (argmax, or a sample)."""
        if deterministic:
            return log_probs.argmax(dim=-1)
        flat = log_probs.reshape(-1, log_probs.shape[-1])
        return torch.multinomial(flat.exp(), 1).reshape(log_probs.shape[:-1])

    def _shaped(self, actions: torch.Tensor) -> torch.Tensor:
        """``[B, K, A]`` -> ``[B, A]`` when K == 1."""
        return actions if self.action_chunk > 1 else actions[:, 0]

    # --- the policy contract ----------------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: dict, deterministic: bool = False):
        """obs -> ``(actions [B, K, A] ([B, A] if K == 1) float32 in the env's action space, logp [B] (sum over the
        K * A tokens), values [B], {"stored.action_tokens": int64 [B, K * A]})``."""
        if self.parallel_decoding:
            logits, values = self._forward(obs, None)
            log_probs = torch.log_softmax(logits, dim=-1)
            columns = self._choose(log_probs, deterministic)
            token_logp = log_probs.gather(-1, columns[..., None])[..., 0]
        else:
            # sample with the KV cache, then score the tokens with the teacher-forced pass evaluate runs: the
            # reported log-prob is bit-for-bit evaluate's (the cache's incremental sums differ in the last bits,
            # ~3e-5 on a 56-token sum of ~-300 in fp32), at the cost of one more forward pass
            columns, _, _ = self._decode(obs, deterministic)
            token_logp, _, values = self.token_log_probs(obs, columns)
        actions = self.action_tokenizer.decode_actions(columns, self.action_chunk)
        stored = {STORED_TOKENS: columns + self.action_tokenizer.first_id, STORED_TOKEN_LOGP: token_logp.float()}
        return self._shaped(actions), token_logp.sum(-1), values, stored

    def token_log_probs(self, obs: dict, columns: torch.Tensor):
        """Per-token log-probs ``[B, K * A]``, entropies ``[B, K * A]`` (restricted softmax) and values ``[B]`` of
        action ``columns`` ``[B, K * A]`` (0..255)."""
        logits, values = self._forward(obs, columns)
        log_probs = torch.log_softmax(logits, dim=-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return log_probs.gather(-1, columns[..., None])[..., 0], entropy, values

    def _columns(self, obs: dict, actions: torch.Tensor) -> torch.Tensor:
        """The decision's columns: the stored tokens when present, else the digitised actions."""
        tokens = obs.get(STORED_TOKENS)
        if tokens is not None:
            return torch.as_tensor(tokens, device=actions.device).long() - self.action_tokenizer.first_id
        return self.action_tokenizer.encode_actions(actions)

    def evaluate(self, obs: dict, actions: torch.Tensor):
        """``(logp [B], entropy [B], values [B])`` of ``actions`` ``[B, A]`` / ``[B, K, A]`` (scored by the stored
        tokens ``obs["stored.action_tokens"]`` when present), sums over the K * A tokens; with gradients."""
        token_logp, entropy, values = self.evaluate_tokens(obs, actions)
        return token_logp.sum(-1), entropy.sum(-1), values

    def evaluate_tokens(self, obs: dict, actions: torch.Tensor):
        """Per token: ``(logp [B, K * A], entropy [B, K * A], values [B])`` of ``actions`` (as ``evaluate``)."""
        return self.token_log_probs(obs, self._columns(obs, actions))

    def value(self, obs: dict) -> torch.Tensor:
        """Values ``[B]``."""
        if self.parallel_decoding:
            return self._forward(obs, None)[1]
        zeros = torch.zeros(len(obs["rgb"]), self.tokens_per_decision, dtype=torch.long, device=obs["rgb"].device)
        return self._forward(obs, zeros)[1]

    def supervised_loss(self, obs: dict, target_actions: torch.Tensor) -> torch.Tensor:
        """SFT: mean cross-entropy of the target actions' bins ``[B, K, A]`` / ``[B, A]`` (teacher forcing for the
        autoregressive policy, one parallel pass for OFT)."""
        columns = self.action_tokenizer.encode_actions(target_actions)
        token_logp, _, _ = self.token_log_probs(obs, columns)
        return -token_logp.mean()


@POLICIES.register("openvla")
class OpenVLA(OpenVLAPolicy):
    """OpenVLA: autoregressive action tokens (KV cache), no proprio token unless ``use_proprio``."""
