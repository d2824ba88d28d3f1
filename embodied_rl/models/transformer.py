"""A small transformer actor-critic over state observations: the state vector is cut into tokens.

Useful where inference should cost about as much as a simulator step (placement benchmarks), and as a template
for token-based policies.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributions import Normal

from embodied_rl.models.registry import POLICIES


@POLICIES.register("transformer")
class TransformerActorCritic(nn.Module):
    """obs ``[B, D]`` -> ``ceil(D / token_size)`` tokens of width ``d_model`` -> encoder -> mean-pooled
    features -> Gaussian action mean ``[B, A]`` (state-independent log std) and value ``[B]``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes=(128,), token_size: int = 4, num_layers: int = 2,
                 num_heads: int = 4, init_log_std: float = -0.5):
        super().__init__()
        d_model = int(list(hidden_sizes)[0])
        self.token_size = token_size
        self.num_tokens = math.ceil(obs_dim / token_size)
        self.pad = self.num_tokens * token_size - obs_dim
        self.embed = nn.Linear(token_size, d_model)
        self.position = nn.Parameter(torch.zeros(1, self.num_tokens, d_model))
        layer = nn.TransformerEncoderLayer(d_model, num_heads, dim_feedforward=2 * d_model, batch_first=True,
                                           dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.actor_mean = nn.Linear(d_model, action_dim)
        nn.init.orthogonal_(self.actor_mean.weight, 0.01)
        nn.init.zeros_(self.actor_mean.bias)
        self.critic = nn.Linear(d_model, 1)
        self.actor_log_std = nn.Parameter(torch.full((1, action_dim), float(init_log_std)))

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        tokens = nn.functional.pad(obs, (0, self.pad)).view(obs.shape[0], self.num_tokens, self.token_size)
        return self.encoder(self.embed(tokens) + self.position).mean(dim=1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.features(obs)).squeeze(-1)

    def distribution(self, obs: torch.Tensor) -> Normal:
        mean = self.actor_mean(self.features(obs))
        return Normal(mean, self.actor_log_std.expand_as(mean).exp())

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        """obs ``[B, D]`` -> actions ``[B, A]``, log-probs ``[B]``, values ``[B]``."""
        features = self.features(obs)
        mean = self.actor_mean(features)
        dist = Normal(mean, self.actor_log_std.expand_as(mean).exp())
        actions = mean if deterministic else dist.sample()
        return actions, dist.log_prob(actions).sum(-1), self.critic(features).squeeze(-1)

    def supervised_loss(self, obs: torch.Tensor, target_actions: torch.Tensor) -> torch.Tensor:
        """Behaviour cloning: mean squared error between the action mean ``[B, A]`` and ``target_actions``."""
        return nn.functional.mse_loss(self.distribution(obs).mean, target_actions)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor):
        features = self.features(obs)
        mean = self.actor_mean(features)
        dist = Normal(mean, self.actor_log_std.expand_as(mean).exp())
        return dist.log_prob(actions).sum(-1), dist.entropy().sum(-1), self.critic(features).squeeze(-1)
