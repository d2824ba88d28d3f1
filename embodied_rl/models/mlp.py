"""Gaussian MLP actor-critic for state observations (the architecture of ManiSkill's PPO baseline), optionally
predicting action chunks, on a chosen subset of the state vector, normalised by demonstration statistics."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributions import Normal

from embodied_rl.models.registry import POLICIES
from embodied_rl.models.state_features import StateFeatures


def _mlp(sizes: list[int], out_gain: float) -> nn.Sequential:
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


@POLICIES.register("mlp")
class MLPActorCritic(StateFeatures, nn.Module):
    """Actor: obs ``[B, D]`` -> Gaussian mean ``[B, A]`` (or ``[B, K, A]`` with ``action_chunk`` K > 1: K actions
    executed open loop) with a state-independent log std; critic: obs -> ``[B]``.

    ``obs_indices`` picks the state features the networks see (None: all D); ``obs_mean`` / ``obs_std`` buffers
    (identity until ``set_observation_normalization``) normalise them and travel with the weights.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes=(256, 256, 256), init_log_std: float = -0.5,
                 action_chunk: int = 1, obs_indices: list | None = None):
        super().__init__()
        hidden = list(hidden_sizes)
        self.action_dim, self.action_chunk = action_dim, int(action_chunk)
        features = self.register_state_features(obs_dim, obs_indices)
        outputs = action_dim * self.action_chunk
        self.actor_mean = _mlp([features, *hidden, outputs], out_gain=0.01 * math.sqrt(2))
        self.critic = _mlp([features, *hidden, 1], out_gain=1.0)
        self.actor_log_std = nn.Parameter(torch.full((1, outputs), float(init_log_std)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.features(obs)).squeeze(-1)

    def distribution(self, obs: torch.Tensor) -> Normal:
        """Over the flat decision ``[B, K * A]``."""
        mean = self.actor_mean(self.features(obs))
        return Normal(mean, self.actor_log_std.expand_as(mean).exp())

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        """obs ``[B, D]`` -> actions ``[B, A]`` (``[B, K, A]`` for chunks), log-probs ``[B]``, values ``[B]``."""
        dist = self.distribution(obs)
        actions = dist.mean if deterministic else dist.sample()
        return self._shaped(actions), dist.log_prob(actions).sum(-1), self.value(obs)

    def supervised_loss(self, obs: torch.Tensor, target_actions: torch.Tensor) -> torch.Tensor:
        """Behaviour cloning: mean squared error between the action mean and ``target_actions`` ``[B, A]`` (or
        ``[B, K, A]``)."""
        return nn.functional.mse_loss(self.distribution(obs).mean, target_actions.reshape(len(obs), -1))

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor):
        """Log-probs ``[B]``, entropies ``[B]`` and values ``[B]`` of ``actions`` ``[B, A]`` (or ``[B, K, A]``)
        under the current policy."""
        dist = self.distribution(obs)
        flat = actions.reshape(len(obs), -1)
        return dist.log_prob(flat).sum(-1), dist.entropy().sum(-1), self.value(obs)
