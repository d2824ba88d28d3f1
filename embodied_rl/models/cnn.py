"""Gaussian actor-critic on a camera image and the proprioceptive state (the shape of ManiSkill's PPO-rgb baseline:
a NatureCNN image encoder beside a state encoder), optionally predicting action chunks. Small by default, so it
trains on a laptop CPU."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from embodied_rl.models.policy import GaussianActorCritic
from embodied_rl.models.registry import POLICIES

_KERNELS = (8, 4, 3)  # NatureCNN's three convolutions: kernel sizes and strides
_STRIDES = (4, 2, 1)
MIN_IMAGE_SIZE = 36
"""The smallest image side the three convolutions fit (8/4 -> 8, 4/2 -> 3, 3/1 -> 1)."""


def _image_encoder(channels_in: int, conv_channels, image_size: tuple[int, int], features: int) -> nn.Sequential:
    """``[B, C, H, W]`` float in 0..1 -> ``[B, features]``: three ReLU convolutions, flatten, linear, ReLU."""
    layers: list[nn.Module] = []
    widths = [channels_in, *conv_channels]
    for i, (kernel, stride) in enumerate(zip(_KERNELS, _STRIDES)):
        conv = nn.Conv2d(widths[i], widths[i + 1], kernel, stride)
        nn.init.orthogonal_(conv.weight, math.sqrt(2))
        nn.init.zeros_(conv.bias)
        layers += [conv, nn.ReLU()]
    convs = nn.Sequential(*layers, nn.Flatten())
    with torch.no_grad():
        flat = convs(torch.zeros(1, channels_in, *image_size)).shape[1]
    linear = nn.Linear(flat, features)
    nn.init.orthogonal_(linear.weight, math.sqrt(2))
    nn.init.zeros_(linear.bias)
    return nn.Sequential(convs, linear, nn.ReLU())


@POLICIES.register("cnn")
class CNNActorCritic(GaussianActorCritic):
    """Actor-critic on dict observations (``env.obs_mode=rgb``).

    obs: ``{"rgb": uint8 [B, H, W, C]`` (channels last, as the envs give them; C = 3, or more for several cameras
    stacked by ManiSkill's flattening wrapper), ``"state": float32 [B, D]}``. An ``"instruction"`` entry (numpy
    strings ``[B]``) is accepted and ignored: this policy reads no language (the VLA policies do).

    Encoder, shared by actor and critic: rgb / 255 -> NatureCNN convolutions (8x8/4, 4x4/2, 3x3/1, widths
    ``conv_channels``) -> ``image_features``; state, normalised by ``state_mean`` / ``state_std`` (identity until
    ``set_observation_normalization``) -> linear ``state_features``; both ReLU, concatenated: ``[B, F]``.
    Actor: F -> ``hidden_sizes`` -> Gaussian mean ``[B, A]`` (``[B, K, A]`` with ``action_chunk`` K > 1: K actions
    run open loop) with a state-independent log std. Critic: F -> ``hidden_sizes`` -> value ``[B]``
    (``GaussianActorCritic``).

    ``obs_shapes`` (given by the runner from the env, see runners/setup.py ``observation_spec``): each observation
    part's shape without the batch axis, ``{"rgb": [H, W, C], "state": [D], ...}``; ``obs_dim`` is D (0: no state).
    """

    observation_modes = ("rgb",)

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes=(64,), init_log_std: float = -0.5,
                 obs_shapes: dict | None = None, action_chunk: int = 1, conv_channels=(16, 32, 32),
                 image_features: int = 64, state_features: int = 32):
        super().__init__()
        if not obs_shapes or "rgb" not in obs_shapes or len(obs_shapes["rgb"]) != 3:
            raise ValueError(f"the cnn policy needs obs_shapes with 'rgb': [H, W, C] (env.obs_mode=rgb), got "
                             f"{obs_shapes!r}")
        height, width, channels = (int(d) for d in obs_shapes["rgb"])
        if min(height, width) < MIN_IMAGE_SIZE:
            raise ValueError(f"the cnn policy needs images of at least {MIN_IMAGE_SIZE}x{MIN_IMAGE_SIZE} pixels, "
                             f"got {height}x{width}")
        if len(conv_channels) != len(_KERNELS):
            raise ValueError(f"conv_channels needs {len(_KERNELS)} widths, got {list(conv_channels)}")
        self.state_dim = int(obs_dim)
        self.image_encoder = _image_encoder(channels, conv_channels, (height, width), image_features)
        self.state_encoder = None
        features = image_features
        if self.state_dim:
            self.state_encoder = nn.Sequential(nn.Linear(self.state_dim, state_features), nn.ReLU())
            nn.init.orthogonal_(self.state_encoder[0].weight, math.sqrt(2))
            nn.init.zeros_(self.state_encoder[0].bias)
            features += state_features
        self.register_buffer("state_mean", torch.zeros(self.state_dim))
        self.register_buffer("state_std", torch.ones(self.state_dim))
        self.build_heads(features, action_dim, hidden_sizes, init_log_std, action_chunk)

    def set_observation_normalization(self, obs) -> None:
        """Normalise the state part by the mean and standard deviation of ``obs`` (demonstrations): a dict with
        ``"state"`` ``[N, D]`` (images are only scaled by 1/255), or the state array itself."""
        state = obs["state"] if isinstance(obs, dict) else obs
        state = torch.as_tensor(np.array(state, dtype=np.float32))
        self.state_mean.copy_(state.mean(dim=0))
        self.state_std.copy_(state.std(dim=0).clamp(min=1e-3))

    def features(self, obs: dict) -> torch.Tensor:
        """obs (see the class) -> shared features ``[B, F]``."""
        image = obs["rgb"].permute(0, 3, 1, 2).float() / 255.0  # [B, C, H, W]
        parts = [self.image_encoder(image)]
        if self.state_encoder is not None:
            parts.append(self.state_encoder((obs["state"].float() - self.state_mean) / self.state_std))
        return torch.cat(parts, dim=-1)
