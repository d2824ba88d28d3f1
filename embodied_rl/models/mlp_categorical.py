"""Categorical MLP actor-critic for tasks with discrete actions (``gym:CartPole-v1``): the architecture of CleanRL's
``ppo.py`` (two tanh layers of 64 by default here via ``policy.hidden_sizes``, orthogonal init, actor output gain
0.01, critic 1.0).

A decision is one of ``n`` actions, sent to the env as a one-hot row ``[n]`` (the env takes its argmax:
``sim_envs/gymnasium_envs/spaces.py``), so the runtime's float32 action arrays carry it unchanged.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributions import Categorical

from embodied_rl.models.policy import Policy, mlp
from embodied_rl.models.registry import POLICIES
from embodied_rl.models.state_features import StateFeatures


@POLICIES.register("mlp_categorical")
class MLPCategoricalActorCritic(StateFeatures, Policy):
    """Actor: obs ``[B, D]`` -> logits ``[B, n]``; critic: obs -> values ``[B]``. Actions are one-hot ``[B, n]``."""

    discrete_actions = True

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes=(64, 64), obs_indices: list | None = None):
        super().__init__()
        features = self.register_state_features(obs_dim, obs_indices)
        self.action_dim, self.action_chunk = int(action_dim), 1
        self.actor_logits = mlp([features, *hidden_sizes, self.action_dim], out_gain=0.01)
        self.critic = mlp([features, *hidden_sizes, 1], out_gain=1.0)

    def distribution(self, features: torch.Tensor) -> Categorical:
        return Categorical(logits=self.actor_logits(features))

    def _one_hot(self, index: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(index, self.action_dim).to(torch.float32)

    @torch.no_grad()
    def act(self, obs, deterministic: bool = False):
        """obs ``[B, D]`` -> one-hot actions ``[B, n]``, log-probs ``[B]``, values ``[B]``."""
        features = self.features(obs)
        dist = self.distribution(features)
        index = dist.probs.argmax(-1) if deterministic else dist.sample()
        return self._one_hot(index), dist.log_prob(index), self.critic(features).squeeze(-1)

    def evaluate(self, obs, actions: torch.Tensor):
        """Log-probs ``[B]``, entropies ``[B]`` and values ``[B]`` of actions ``[B, n]`` (their argmax)."""
        features = self.features(obs)
        dist = self.distribution(features)
        index = actions.reshape(len(features), self.action_dim).argmax(-1)
        return dist.log_prob(index), dist.entropy(), self.critic(features).squeeze(-1)

    def value(self, obs) -> torch.Tensor:
        return self.critic(self.features(obs)).squeeze(-1)

    def supervised_loss(self, obs, target_actions: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the logits against the demonstrated actions ``[B, n]`` (their argmax)."""
        logits = self.actor_logits(self.features(obs))
        return nn.functional.cross_entropy(logits, target_actions.reshape(len(logits), -1).argmax(-1))
