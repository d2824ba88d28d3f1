"""What the state-vector policies share: a chosen subset of the state's features, normalised by demonstration
statistics that travel with the weights, and decisions that are chunks of K actions."""

from __future__ import annotations

import numpy as np
import torch


class StateFeatures:
    """Mixin for an ``nn.Module`` policy with buffers ``obs_indices`` ``[F]`` (long), ``obs_mean`` / ``obs_std``
    ``[F]`` (identity until ``set_observation_normalization``) and attributes ``action_dim``, ``action_chunk``."""

    def register_state_features(self, obs_dim: int, obs_indices: list | None) -> int:
        """Register the buffers for ``obs_indices`` of a ``obs_dim`` state (None: all of it); returns F."""
        if obs_indices is not None and not all(0 <= int(i) < obs_dim for i in obs_indices):
            raise ValueError(f"obs_indices must lie in 0..{obs_dim - 1}, got {list(obs_indices)}")
        self.register_buffer("obs_indices", torch.as_tensor(list(obs_indices if obs_indices is not None
                                                                 else range(obs_dim)), dtype=torch.long))
        features = len(self.obs_indices)
        self.register_buffer("obs_mean", torch.zeros(features))
        self.register_buffer("obs_std", torch.ones(features))
        return features

    def set_observation_normalization(self, obs: np.ndarray) -> None:
        """Normalise by the mean and standard deviation of ``obs`` ``[N, D]`` (e.g. demonstrations)."""
        selected = torch.as_tensor(np.array(obs, dtype=np.float32))[:, self.obs_indices.cpu()]
        self.obs_mean.copy_(selected.mean(dim=0))
        self.obs_std.copy_(selected.std(dim=0).clamp(min=1e-3))

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """obs ``[B, D]`` -> normalised features ``[B, F]``."""
        return (obs[:, self.obs_indices] - self.obs_mean) / self.obs_std

    def _shaped(self, flat: torch.Tensor) -> torch.Tensor:
        """A flat decision ``[B, K * A]`` as actions ``[B, A]`` or chunks ``[B, K, A]``."""
        return flat.view(-1, self.action_chunk, self.action_dim) if self.action_chunk > 1 else flat
