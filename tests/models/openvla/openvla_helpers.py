"""Shared helpers of the openvla tests: tiny policies on small camera images."""

import numpy as np
import pytest
import torch

import embodied_rl.models.openvla  # noqa: F401  (registers openvla, openvla_oft)
from embodied_rl.models.registry import build_policy

SHAPES = {"rgb": [32, 32, 3], "state": [5]}
ACTION_DIM = 3


def make_policy(name: str, seed: int = 0, **options):
    torch.manual_seed(seed)
    options.setdefault("action_chunk", 2)
    return build_policy(name, obs_dim=5, action_dim=ACTION_DIM, hidden_sizes=[32], obs_shapes=SHAPES, **options)


def make_obs(batch: int, seed: int = 0, instructions=None) -> dict:
    generator = torch.Generator().manual_seed(seed)
    if instructions is None:
        instructions = ["pick up the red cube", "push", "stack the green cube on the blue one", ""] * batch
    return {"rgb": torch.randint(0, 256, (batch, 32, 32, 3), dtype=torch.uint8, generator=generator),
            "state": torch.randn(batch, 5, generator=generator),
            "instruction": np.array(instructions[:batch])}


def rows(obs: dict, index) -> dict:
    return {k: (v[index] if not isinstance(v, np.ndarray) else v[np.asarray(index)]) for k, v in obs.items()}


def supervised_losses(policy, obs: dict, targets: torch.Tensor, steps: int, lr: float = 3e-3) -> list[float]:
    """``steps`` Adam steps of ``policy.supervised_loss(obs, targets)``; the loss before each step."""
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = policy.supervised_loss(obs, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
