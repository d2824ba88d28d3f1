"""The small API every policy implements, and the Gaussian actor-critic head the MLP and CNN policies share.

A policy is an ``nn.Module`` registered in ``POLICIES`` under a name, built by ``build_policy(name, obs_dim,
action_dim, **options)`` (the common options ``hidden_sizes``, ``init_log_std``, ``obs_shapes`` and ``size`` reach it
only if its constructor takes them). What the algorithms call, by what they need (``Algorithm.needs``):

* every RL policy: ``act(obs, deterministic=False) -> (actions [B, A] or [B, K, A], logp [B], values [B])`` under
  ``torch.no_grad``, and ``evaluate(obs, actions) -> (logp [B], entropy [B], values [B])`` with gradients;
* SFT: ``supervised_loss(obs, target_actions) -> scalar``;
* ``ratio_level=token``: ``evaluate_tokens(obs, actions) -> (token_logp [B, M], token_entropy [B, M], values [B])``;
* SAC and RLPD: ``q_values`` and ``sample`` (``models/mlp_sac.py``);
* optional: ``set_observation_normalization(obs)``, ``set_action_statistics(actions)`` (from demonstrations).

Class attributes: ``observation_modes`` (the ``env.obs_mode`` values it takes) and ``sizes`` (``policy.size``).

Mixed precision (``compute_dtype`` bf16 or fp16, e.g. a VLA's ``policy.options.dtype``): frozen weights are stored in
the compute dtype, the weights that train in float32 (``keep_trained_weights_in_float32``: the master weights the
optimizer updates; a bf16 weight of 0.02 does not move by Adam's 5e-6 steps), and the network runs under
``torch.autocast`` to the compute dtype (``in_compute_dtype``). Weights travel and are checkpointed as stored.
"""

from __future__ import annotations

import contextlib
import functools
import math

import torch
from torch import nn
from torch.distributions import Normal


class Policy(nn.Module):
    """Base class of the policies: the class attributes with their defaults; the methods above are the API."""

    observation_modes: tuple[str, ...] = ("state",)
    sizes: tuple[str, ...] = ("tiny",)
    compute_dtype: torch.dtype = torch.float32
    checkpointable_layers: bool = False
    """Whether ``enable_activation_checkpointing`` has transformer layers to recompute (the VLAs)."""

    def enable_activation_checkpointing(self) -> int:
        """Recompute the layers of every Hugging Face model inside this policy in the backward pass instead of
        keeping their activations (``gradient_checkpointing_enable``, non-reentrant: works with frozen inputs and
        LoRA). Returns how many models it was enabled on."""
        enabled: list[str] = []
        for name, module in self.named_modules():
            inside = any(name.startswith(outer + ".") for outer in enabled)  # the outer model enables its parts
            if inside or not getattr(module, "supports_gradient_checkpointing", False):
                continue
            if hasattr(module, "activation_checkpointing_enable"):  # transformers >= 5.2x
                module.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            elif hasattr(module, "gradient_checkpointing_enable"):
                module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            else:
                continue
            enabled.append(name)
        if not enabled:
            raise ValueError(f"{type(self).__name__} has no transformer layers to checkpoint")
        return len(enabled)

    def keep_trained_weights_in_float32(self) -> None:
        """Store every parameter that requires gradients in float32 (the master weights); frozen ones keep their
        dtype. Call after the last change of ``requires_grad`` (LoRA) and before an optimizer is made."""
        for parameter in self.parameters():
            if parameter.requires_grad and parameter.dtype != torch.float32:
                parameter.data = parameter.data.float()

    def autocast(self):
        """The context the network runs in: ``torch.autocast`` to ``compute_dtype`` on the policy's device (none
        for float32)."""
        if self.compute_dtype == torch.float32:
            return contextlib.nullcontext()
        device = next(self.parameters()).device.type
        return torch.autocast(device_type=device, dtype=self.compute_dtype)

    def act(self, obs, deterministic: bool = False):  # pragma: no cover - the interface
        raise NotImplementedError

    def evaluate(self, obs, actions: torch.Tensor):  # pragma: no cover - the interface
        raise NotImplementedError


@contextlib.contextmanager
def built_in(dtype: torch.dtype):
    """Modules made inside are created in ``dtype`` (``torch.set_default_dtype``): a bf16 network is never held in
    float32 first (a 7.5B VLA: 15 GB, not 30 GB and then 15)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@contextlib.contextmanager
def uninitialised(enabled: bool = True):
    """Modules made inside skip their random initialisation (torch's ``nn.init`` functions and Hugging Face's
    ``init_weights`` do nothing: transformers' ``no_init_weights``), for weights a checkpoint fills next: a 7.5B
    network is built in seconds, not minutes. Every such weight must then be loaded (or set)."""
    if not enabled:
        yield
        return
    from transformers.initialization import no_init_weights

    with no_init_weights():
        yield


def in_compute_dtype(method):
    """Decorate a policy method whose network runs under ``Policy.autocast``."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self.autocast():
            return method(self, *args, **kwargs)

    return wrapper


def full_precision(tensor_method):
    """Decorate a method that must compute in float32 even when called under autocast (e.g. logits from which
    log-probs are taken)."""

    @functools.wraps(tensor_method)
    def wrapper(self, *args, **kwargs):
        with torch.autocast(device_type=next(self.parameters()).device.type, enabled=False):
            return tensor_method(self, *args, **kwargs)

    return wrapper


def mlp(sizes: list[int], out_gain: float) -> nn.Sequential:
    """Linear layers of ``sizes`` with tanh between them, orthogonal init (gain sqrt 2, ``out_gain`` for the last),
    zero biases: ``[B, sizes[0]] -> [B, sizes[-1]]``."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        linear = nn.Linear(sizes[i], sizes[i + 1])
        last = i == len(sizes) - 2
        nn.init.orthogonal_(linear.weight, out_gain if last else math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


class GaussianActorCritic(Policy):
    """A Gaussian actor and a critic on shared features: subclasses build their encoder, call ``build_heads`` and
    define ``features(obs) -> [B, F]``.

    Actor: F -> ``hidden_sizes`` (tanh) -> mean ``[B, K * A]`` with a state-independent log std, actions ``[B, A]``
    (``[B, K, A]`` with ``action_chunk`` K > 1: K actions run open loop); critic: F -> ``hidden_sizes`` -> ``[B]``.
    The parameter names (``actor_mean``, ``critic``, ``actor_log_std``) are those of ManiSkill's PPO baseline.
    """

    def build_heads(self, features: int, action_dim: int, hidden_sizes, init_log_std: float,
                    action_chunk: int = 1) -> None:
        self.action_dim, self.action_chunk = action_dim, int(action_chunk)
        outputs = action_dim * self.action_chunk
        hidden = list(hidden_sizes)
        self.actor_mean = mlp([features, *hidden, outputs], out_gain=0.01 * math.sqrt(2))
        self.critic = mlp([features, *hidden, 1], out_gain=1.0)
        self.actor_log_std = nn.Parameter(torch.full((1, outputs), float(init_log_std)))

    def features(self, obs) -> torch.Tensor:  # pragma: no cover - the interface
        raise NotImplementedError

    def distribution(self, obs=None, features: torch.Tensor | None = None) -> Normal:
        """Over the flat decision ``[B, K * A]``, from ``obs`` or from already computed ``features``."""
        mean = self.actor_mean(self.features(obs) if features is None else features)
        return Normal(mean, self.actor_log_std.expand_as(mean).exp())

    def _shaped(self, flat: torch.Tensor) -> torch.Tensor:
        """``[B, K * A]`` -> ``[B, K, A]`` for chunks (``[B, A]`` unchanged)."""
        return flat.view(-1, self.action_chunk, self.action_dim) if self.action_chunk > 1 else flat

    def value(self, obs) -> torch.Tensor:
        """Values ``[B]``."""
        return self.critic(self.features(obs)).squeeze(-1)

    @torch.no_grad()
    def act(self, obs, deterministic: bool = False):
        """obs -> actions ``[B, A]`` (``[B, K, A]`` for chunks), log-probs ``[B]`` (summed over the K * A
        dimensions), values ``[B]``."""
        features = self.features(obs)
        dist = self.distribution(features=features)
        actions = dist.mean if deterministic else dist.sample()
        return self._shaped(actions), dist.log_prob(actions).sum(-1), self.critic(features).squeeze(-1)

    def evaluate(self, obs, actions: torch.Tensor):
        """Log-probs ``[B]``, entropies ``[B]`` and values ``[B]`` of ``actions`` ``[B, A]`` (or ``[B, K, A]``)
        under the current policy."""
        features = self.features(obs)
        dist = self.distribution(features=features)
        flat = actions.reshape(len(features), -1)
        return dist.log_prob(flat).sum(-1), dist.entropy().sum(-1), self.critic(features).squeeze(-1)

    def supervised_loss(self, obs, target_actions: torch.Tensor) -> torch.Tensor:
        """Behaviour cloning: mean squared error between the action mean ``[B, K * A]`` and ``target_actions``
        ``[B, A]`` (or ``[B, K, A]``)."""
        mean = self.distribution(obs).mean
        return nn.functional.mse_loss(mean, target_actions.reshape(len(mean), -1))
