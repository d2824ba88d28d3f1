"""Gaussian MLP actor-critic for state observations (the architecture of ManiSkill's PPO baseline)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributions import Normal

from embodied_rl.models.registry import POLICIES


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
class MLPActorCritic(nn.Module):
    """Actor: obs ``[B, D]`` -> Gaussian mean ``[B, A]`` with a state-independent log std; critic: obs -> ``[B]``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes=(256, 256, 256), init_log_std: float = -0.5):
        super().__init__()
        hidden = list(hidden_sizes)
        self.actor_mean = _mlp([obs_dim, *hidden, action_dim], out_gain=0.01 * math.sqrt(2))
        self.critic = _mlp([obs_dim, *hidden, 1], out_gain=1.0)
        self.actor_log_std = nn.Parameter(torch.full((1, action_dim), float(init_log_std)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def distribution(self, obs: torch.Tensor) -> Normal:
        mean = self.actor_mean(obs)
        return Normal(mean, self.actor_log_std.expand_as(mean).exp())

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        """obs ``[B, D]`` -> actions ``[B, A]``, log-probs ``[B]``, values ``[B]``."""
        dist = self.distribution(obs)
        actions = dist.mean if deterministic else dist.sample()
        return actions, dist.log_prob(actions).sum(-1), self.value(obs)

    def supervised_loss(self, obs: torch.Tensor, target_actions: torch.Tensor) -> torch.Tensor:
        """Behaviour cloning: mean squared error between the action mean ``[B, A]`` and ``target_actions``."""
        return nn.functional.mse_loss(self.distribution(obs).mean, target_actions)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor):
        """Log-probs ``[B]``, entropies ``[B]`` and values ``[B]`` of ``actions`` ``[B, A]`` under the current policy."""
        dist = self.distribution(obs)
        return dist.log_prob(actions).sum(-1), dist.entropy().sum(-1), self.value(obs)
