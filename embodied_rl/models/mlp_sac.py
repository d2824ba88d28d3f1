"""Tanh-squashed Gaussian MLP actor with an ensemble of Q critics, for the off-policy learners (SAC, RLPD): the
architecture of ManiSkill's SAC baseline (ReLU MLPs, state-dependent log std, twin Q), optionally with RLPD's
layer-normalised critics and a larger ensemble. It also has a state-value head and ``evaluate``, so PPO and GRPO
train it too: one SFT checkpoint starts every learner.

With ``residual`` the actor is a frozen clone plus a learned correction (residual RL, as Policy Decorator and ResiP
fine-tune a cloned policy): the clone's layers keep the weights they were loaded with (an SFT checkpoint of the
plain actor, ``init_from``), and a residual network, which sees the features and the clone's mean, adds to the
clone's pre-squash mean and log std. Its output layers start at zero, so the fine-tuned actor starts as exactly
the clone; ``clone_distribution`` gives the clone's own Gaussian, for a KL term that holds the actor near it
(``algorithm.clone_kl_weight``)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributions import Normal

from embodied_rl.models.policy import Policy
from embodied_rl.models.registry import POLICIES
from embodied_rl.models.state_features import StateFeatures

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
PRE_SQUASH_BOUND = 6.0
"""Draws ``u`` stay within +-this (the mean within +-5, smoothly): float32 ``tanh`` rounds to 1.0 from |u| ~ 9, so
a stored action ``tanh(u)`` gives ``u`` back through ``atanh`` only for bounded ``u`` (at 6 within ~0.003), and
on-policy learners take log-probs of stored actions (a clone of saturated demonstration actions otherwise puts its
mean far out, where every sample's log-prob comes back several standard deviations off)."""
MEAN_BOUND = 5.0
ACTION_BOUND = math.tanh(PRE_SQUASH_BOUND)


def relu_mlp(sizes: list[int], layer_norm: bool = False) -> nn.Sequential:
    """Linear layers of ``sizes`` with ReLU (and LayerNorm before it, RLPD's critics) between them."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            if layer_norm:
                layers.append(nn.LayerNorm(sizes[i + 1]))
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


@POLICIES.register("mlp_sac")
class SquashedGaussianActorQ(StateFeatures, Policy):
    """Actor: obs ``[B, D]`` -> ``tanh(u)``, ``u ~ N(mean(obs), std(obs))`` over the flat decision ``[B, K * A]``
    (K > 1 with ``action_chunk``: K actions run open loop), actions in [-1, 1] as ManiSkill's normalised
    controllers take them; critics: ``num_q`` networks ``Q(obs, action)`` -> ``[num_q, B]``.

    Parameters of the critics are named ``critic*`` (the off-policy learners give them an optimizer of their own).
    ``obs_indices`` / ``obs_mean`` / ``obs_std`` select and normalise state features as the ``mlp`` policy does.
    ``residual``: the actor layers above are the frozen clone, and ``residual_*`` layers (zero at the start) learn a
    correction whose mean is multiplied by ``residual_scale`` (< 1 slows the correction's first moves).
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes=(256, 256, 256), init_log_std: float = -0.5,
                 action_chunk: int = 1, obs_indices: list | None = None, num_q: int = 2,
                 critic_layer_norm: bool = False, residual: bool = False, residual_scale: float = 1.0):
        super().__init__()
        hidden = list(hidden_sizes)
        self.action_dim, self.action_chunk = action_dim, int(action_chunk)
        if int(num_q) < 1:
            raise ValueError(f"num_q must be >= 1, got {num_q}")
        features = self.register_state_features(obs_dim, obs_indices)
        self.decision_dim = action_dim * self.action_chunk
        self.actor_trunk = relu_mlp([features, *hidden])
        self.actor_trunk.append(nn.ReLU())
        self.actor_mean = nn.Linear(hidden[-1], self.decision_dim)
        self.actor_log_std = nn.Linear(hidden[-1], self.decision_dim)
        nn.init.zeros_(self.actor_log_std.weight)
        nn.init.constant_(self.actor_log_std.bias, float(init_log_std))
        self.residual, self.residual_scale = bool(residual), float(residual_scale)
        if not self.residual_scale > 0:
            raise ValueError(f"residual_scale must be > 0, got {residual_scale}")
        if self.residual:
            for clone_part in (self.actor_trunk, self.actor_mean, self.actor_log_std):
                clone_part.requires_grad_(False)
            self.residual_trunk = relu_mlp([features + self.decision_dim, *hidden])
            self.residual_trunk.append(nn.ReLU())
            self.residual_mean = nn.Linear(hidden[-1], self.decision_dim)
            self.residual_log_std = nn.Linear(hidden[-1], self.decision_dim)
            for head in (self.residual_mean, self.residual_log_std):
                nn.init.zeros_(head.weight)
                nn.init.zeros_(head.bias)
        self.critic_q = nn.ModuleList(relu_mlp([features + self.decision_dim, *hidden, 1], critic_layer_norm)
                                      for _ in range(int(num_q)))
        # A state-value head, so on-policy learners (PPO, GRPO) can start from the same SFT checkpoint as SAC
        self.critic_value = relu_mlp([features, *hidden, 1])

    @property
    def num_q(self) -> int:
        return len(self.critic_q)

    def distribution(self, obs: torch.Tensor) -> Normal:
        """The pre-squash Gaussian over ``u`` ``[B, K * A]`` (with ``residual``: the clone's plus the correction)."""
        features = self.features(obs)
        mean, log_std = self._clone_head(features)
        if self.residual:
            hidden = self.residual_trunk(torch.cat([features, mean.detach()], dim=-1))
            mean = mean + self.residual_scale * self.residual_mean(hidden)
            log_std = log_std + self.residual_log_std(hidden)
        return _bounded_normal(mean, log_std)

    def clone_distribution(self, obs: torch.Tensor) -> Normal:
        """The frozen clone's pre-squash Gaussian ``[B, K * A]`` (``residual`` only), without gradients."""
        if not self.residual:
            raise ValueError("clone_distribution needs the residual actor (policy.options.residual=true)")
        with torch.no_grad():
            return _bounded_normal(*self._clone_head(self.features(obs)))

    def clone_entropy(self, obs: torch.Tensor) -> float:
        """The clone's entropy on ``obs`` ``[B, D]``: the mean ``-log p`` of its squashed draws (nats per decision)."""
        clone = self.clone_distribution(obs)
        with torch.no_grad():
            u = clone.sample().clamp(-PRE_SQUASH_BOUND, PRE_SQUASH_BOUND)
            return float(-squashed_log_prob(clone, u).mean())

    def _clone_head(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The (plain or clone) actor's unbounded mean and log std ``[B, K * A]``."""
        hidden = self.actor_trunk(features)
        return self.actor_mean(hidden), self.actor_log_std(hidden)

    def complete_weights(self, weights: dict) -> dict:
        """``weights`` with the residual layers this policy has now added where they lack them (an SFT checkpoint of
        the plain actor loaded into the residual one: the correction starts at zero)."""
        if not self.residual:
            return weights
        own = {name: value for name, value in self.state_dict().items() if name.startswith("residual_")}
        return {**own, **weights}

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised draw: actions ``[B, K * A]`` in (-1, 1) and their log-probs ``[B]`` (change of variables
        through tanh), differentiable in the actor's weights."""
        dist = self.distribution(obs)
        u = dist.rsample().clamp(-PRE_SQUASH_BOUND, PRE_SQUASH_BOUND)
        return torch.tanh(u), squashed_log_prob(dist, u)

    def q_values(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Every critic's ``Q(obs, actions)``: ``[num_q, B]``; actions ``[B, K * A]`` (or ``[B, K, A]``)."""
        inputs = torch.cat([self.features(obs), actions.reshape(len(actions), -1)], dim=-1)
        return torch.stack([q(inputs).squeeze(-1) for q in self.critic_q])

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State value ``[B]`` (for PPO; the off-policy learners use ``q_values``)."""
        return self.critic_value(self.features(obs)).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor):
        """For on-policy learners: log-probs ``[B]`` of stored actions ``[B, A]`` (or ``[B, K, A]``) through
        ``u = atanh(a)`` (``a`` clamped to ``tanh(PRE_SQUASH_BOUND)``), entropies ``[B]`` (the Gaussian's plus the
        squash's log-Jacobian at these actions) and state values ``[B]``."""
        dist = self.distribution(obs)
        flat = actions.reshape(len(obs), -1).clamp(-ACTION_BOUND, ACTION_BOUND)
        u = torch.atanh(flat)
        logp = squashed_log_prob(dist, u)
        entropy = dist.entropy().sum(-1) - (dist.log_prob(u).sum(-1) - logp)
        return logp, entropy, self.value(obs)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        """obs ``[B, D]`` -> actions ``[B, A]`` (``[B, K, A]`` for chunks), log-probs ``[B]``, state values
        ``[B]``."""
        dist = self.distribution(obs)
        u = dist.mean if deterministic else dist.sample().clamp(-PRE_SQUASH_BOUND, PRE_SQUASH_BOUND)
        return self._shaped(torch.tanh(u)), squashed_log_prob(dist, u), self.value(obs)

    def supervised_loss(self, obs: torch.Tensor, target_actions: torch.Tensor) -> torch.Tensor:
        """Behaviour cloning: mean squared error between the squashed mean ``tanh(mean)`` and ``target_actions``
        ``[B, A]`` (or ``[B, K, A]``)."""
        return nn.functional.mse_loss(torch.tanh(self.distribution(obs).mean), target_actions.reshape(len(obs), -1))


def _bounded_normal(mean: torch.Tensor, log_std: torch.Tensor) -> Normal:
    """The Gaussian of an unbounded mean (kept within +-``MEAN_BOUND`` smoothly) and log std (clamped)."""
    return Normal(MEAN_BOUND * torch.tanh(mean / MEAN_BOUND), log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp())


def squashed_log_prob(dist: Normal, u: torch.Tensor) -> torch.Tensor:
    """``log p(tanh(u))`` ``[B]`` of pre-squash draws ``u`` ``[B, M]``: the Gaussian's log-density minus
    ``sum log(1 - tanh(u)^2)``, in the stable form ``2 (log 2 - u - softplus(-2u))``."""
    correction = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
    return (dist.log_prob(u) - correction).sum(-1)
