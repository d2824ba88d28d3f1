"""Policy weights as plain numpy arrays: how they leave a worker (object store, checkpoints) and come back."""

from __future__ import annotations

import numpy as np
import torch


def weights_to_numpy(policy: torch.nn.Module) -> dict[str, np.ndarray]:
    """``policy.state_dict()`` copied to host memory as numpy arrays (safe to hand to another process)."""
    return {name: value.detach().cpu().numpy().copy() for name, value in policy.state_dict().items()}


def load_numpy_weights(policy: torch.nn.Module, weights: dict) -> None:
    """Copy ``{name: array}`` into ``policy``'s tensors, wherever they live (device or host)."""
    policy.load_state_dict({name: torch.from_numpy(np.array(value)) for name, value in weights.items()})
