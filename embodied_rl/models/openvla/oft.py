"""The registered ``openvla_oft`` policy: OpenVLA-OFT's parallel decoding of a whole action chunk in one forward
pass, with a proprio token, decoding either OpenVLA's action tokens or continuous actions from OFT's L1 regression
head (``action_head.py``)."""

from __future__ import annotations

import math

import torch
from torch import nn

from embodied_rl.models.openvla.configuration import invalid_option
from embodied_rl.models.openvla.policy import STORED_TOKEN_LOGP, OpenVLAPolicy
from embodied_rl.models.policy import full_precision, in_compute_dtype
from embodied_rl.models.registry import POLICIES

STORED_NORMALIZED = "stored.normalized_actions"
"""What the L1 head's ``act`` stores: the sampled actions in the normalised space ``[B, K * A]`` float32, so
``evaluate`` scores exactly them (the env's actions are their unnormalised, possibly clipped, image)."""
HALF_LOG_TWO_PI_E = 0.5 * math.log(2 * math.pi * math.e)


@POLICIES.register("openvla_oft")
class OpenVLAOFT(OpenVLAPolicy):
    """OpenVLA-OFT (moojink/openvla-oft, ``prismatic/extern/hf/modeling_prismatic.py``, ``predict_action``): the LM
    sees ``[BOS, patches, proprio token, prompt, empty token, K * A placeholders, stop token]`` with bidirectional
    attention over all of it, and the hidden states one position before each placeholder (the last prompt token,
    then the placeholders but the last) give the chunk. The state enters as one proprio token (OFT's
    ``proprio_projector`` on the normalised state). OFT feeds zero placeholder embeddings; here they are the
    learned ``action_queries``, zeros when loaded from a published checkpoint.

    ``action_head`` option: ``tokens`` (OpenVLA's 256 bins read from the LM head at those positions, sampled
    independently) or ``l1_regression`` (OFT's published LIBERO checkpoints: an MLP-ResNet on those hidden states
    regresses the normalised chunk, the ``action_head--*_checkpoint.pt`` file). Default: ``l1_regression`` when the
    checkpoint holds an action head file, else ``tokens``.

    RL with the L1 head (not in the reference, which regresses deterministically): the policy is a Gaussian in the
    normalised action space around the regressed chunk, ``N(mean, exp(action_log_std)^2)`` per coordinate
    (``action_log_std`` ``[A]``, initialised to ``init_log_std``, trained, saved in the heads file); ``act``
    samples it (``deterministic``: the mean, the reference's output), log-probs sum the ``K * A`` coordinates, and
    ``supervised_loss`` is the reference's L1 distance to the normalised targets. With ``std_from_residuals``, SFT
    also sets ``action_log_std`` to the clone's own spread: per action dimension, half the log of a running mean
    (decay 0.99 per batch) of the squared residuals ``(mean - target)^2`` over the batch and the chunk, the
    maximum-likelihood Gaussian around the regressed chunk; RL then starts from a Gaussian as narrow as the clone's
    errors instead of a fixed ``init_log_std``."""

    residual_decay = 0.99

    parallel_decoding = True
    default_proprio = True
    action_heads = ("tokens", "l1_regression")

    def _build_action_head(self, choice, loaded, width: int, init_log_std: float):
        from embodied_rl.models.openvla.action_head import L1RegressionActionHead

        if choice is None:
            choice = "l1_regression" if loaded is not None and loaded.action_head is not None else "tokens"
        if choice not in self.action_heads:
            raise invalid_option("action_head", choice, self.action_heads)
        if choice == "tokens":
            return None, None
        head = L1RegressionActionHead(width, self.action_dim)
        return head, nn.Parameter(torch.full((self.action_dim,), float(init_log_std)))

    # --- the L1 head ------------------------------------------------------------------------------------------
    @in_compute_dtype
    def _regress(self, obs: dict):
        """-> normalised chunk means ``[B, K * A]`` float32 and values ``[B]``. With ``train_action_head_only`` the
        frozen trunk runs without autograd (nothing before the heads is trained, so no activation is kept)."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.train_action_head_only):
            hidden, last = self._action_hidden(obs, None)
        return self._head(hidden), self._value(last)

    @full_precision
    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        dtype = self.action_head.model.fc1.weight.dtype
        return self.action_head(hidden.to(dtype)).float().reshape(len(hidden), -1)

    def _log_std(self) -> torch.Tensor:
        """``[K * A]``: each coordinate's log-std (``action_log_std [A]`` tiled over the chunk) plus
        ``log(std_scale)`` (RL may explore narrower than the clone's residuals, which SFT fits), floored at
        ``log(min_std)`` where the option is set (a dimension the demonstrations never vary, such as PushCube's
        gripper, fits a std near 0, where the smallest move of the mean is a huge ratio)."""
        log_std = self.action_log_std.float() + self.log_std_shift
        if self.min_log_std is not None:
            log_std = log_std.clamp(min=self.min_log_std)
        return log_std.repeat(self.action_chunk)

    def _std(self) -> torch.Tensor:
        """``[K * A]``: each coordinate's std."""
        return self._log_std().exp()

    def _gaussian(self, mean: torch.Tensor, sample: torch.Tensor):
        """Per-coordinate log-probs and entropies ``[B, K * A]`` of ``sample`` under ``N(mean, std^2)``."""
        log_std = self._log_std()
        logp = -0.5 * ((sample - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
        return logp, (HALF_LOG_TWO_PI_E + log_std).expand_as(mean)

    def _stored_normalized(self, obs: dict, actions: torch.Tensor) -> torch.Tensor:
        stored = obs.get(STORED_NORMALIZED)
        if stored is not None:
            return torch.as_tensor(stored, device=actions.device).float()
        return self.action_tokenizer.normalize(actions).reshape(len(actions), -1)

    # --- the policy contract ----------------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: dict, deterministic: bool = False):
        """Tokens: as ``OpenVLAPolicy.act``. L1: ``(actions [B, K, A] ([B, A] if K == 1), logp [B], values [B],
        {"stored.normalized_actions": [B, K * A], "stored.token_logp": [B, K * A]})``."""
        if self.action_head is None:
            return super().act(obs, deterministic)
        mean, values = self._regress(obs)
        sample = mean if deterministic else mean + self._std() * torch.randn(mean.shape).to(mean.device)
        logp, _ = self._gaussian(mean, sample)
        actions = self.action_tokenizer.unnormalize(sample.reshape(len(sample), self.action_chunk, self.action_dim))
        stored = {STORED_NORMALIZED: sample, STORED_TOKEN_LOGP: logp}
        return self._shaped(actions), logp.sum(-1), values, stored

    def evaluate_tokens(self, obs: dict, actions: torch.Tensor):
        """Per coordinate (L1) or token: ``(logp [B, K * A], entropy [B, K * A], values [B])``."""
        if self.action_head is None:
            return super().evaluate_tokens(obs, actions)
        mean, values = self._regress(obs)
        logp, entropy = self._gaussian(mean, self._stored_normalized(obs, actions))
        return logp, entropy, values

    def value(self, obs: dict) -> torch.Tensor:
        """Values ``[B]``."""
        return super().value(obs) if self.action_head is None else self._regress(obs)[1]

    def supervised_loss(self, obs: dict, target_actions: torch.Tensor) -> torch.Tensor:
        """Tokens: cross-entropy of the target bins. L1: mean ``|mean - normalise(target)|`` (OFT's L1 loss)."""
        if self.action_head is None:
            return super().supervised_loss(obs, target_actions)
        target = self.action_tokenizer.normalize(target_actions).reshape(len(target_actions), -1)
        mean = self._regress(obs)[0]
        if self.std_from_residuals:
            self._fit_std(mean.detach(), target)
        return (mean - target).abs().mean()

    @torch.no_grad()
    def _fit_std(self, mean: torch.Tensor, target: torch.Tensor) -> None:
        """``action_log_std [A]`` from the running mean of the squared residuals of chunks ``[B, K * A]``."""
        squares = (mean - target).float().pow(2).reshape(-1, self.action_chunk, self.action_dim).mean((0, 1))
        running = getattr(self, "_residual_squares", None)
        running = squares if running is None else self.residual_decay * running + (1 - self.residual_decay) * squares
        self._residual_squares = running
        self.action_log_std.copy_(0.5 * torch.log(running.clamp(min=1e-8)).to(self.action_log_std.dtype))
