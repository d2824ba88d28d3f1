"""Gaussian MLP actor-critic for state observations (the architecture of ManiSkill's PPO baseline), optionally
predicting action chunks, on a chosen subset of the state vector, normalised by demonstration statistics."""

from __future__ import annotations

from embodied_rl.models.policy import GaussianActorCritic
from embodied_rl.models.registry import POLICIES
from embodied_rl.models.state_features import StateFeatures


@POLICIES.register("mlp")
class MLPActorCritic(StateFeatures, GaussianActorCritic):
    """Actor: obs ``[B, D]`` -> Gaussian mean ``[B, A]`` (or ``[B, K, A]`` with ``action_chunk`` K > 1: K actions
    executed open loop) with a state-independent log std; critic: obs -> ``[B]`` (``GaussianActorCritic``).

    ``obs_indices`` picks the state features the networks see (None: all D); ``obs_mean`` / ``obs_std`` buffers
    (identity until ``set_observation_normalization``) normalise them and travel with the weights.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes=(256, 256, 256), init_log_std: float = -0.5,
                 action_chunk: int = 1, obs_indices: list | None = None):
        super().__init__()
        features = self.register_state_features(obs_dim, obs_indices)
        self.build_heads(features, action_dim, hidden_sizes, init_log_std, action_chunk)
