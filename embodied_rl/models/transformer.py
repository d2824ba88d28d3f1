"""A small transformer actor-critic over state observations: the state vector is cut into tokens.

Useful where inference should cost about as much as a simulator step (placement benchmarks), and as a template
for token-based policies.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from embodied_rl.models.policy import GaussianActorCritic
from embodied_rl.models.registry import POLICIES


@POLICIES.register("transformer")
class TransformerActorCritic(GaussianActorCritic):
    """obs ``[B, D]`` -> ``ceil(D / token_size)`` tokens of width ``d_model`` -> encoder -> mean-pooled
    features -> Gaussian action mean ``[B, A]`` (state-independent log std) and value ``[B]``, each one linear
    layer on the features (``GaussianActorCritic``'s act, evaluate and supervised loss)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes=(128,), token_size: int = 4, num_layers: int = 2,
                 num_heads: int = 4, init_log_std: float = -0.5):
        super().__init__()
        self.action_dim, self.action_chunk = action_dim, 1
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
