"""Tiny synthetic ``DemoDataset``s for the LeRobot tests (no simulator)."""

from __future__ import annotations

import numpy as np

from embodied_rl.demos.dataset import DemoDataset

LENGTHS = (5, 3, 4)
"""Steps of each episode: 12 frames in 3 episodes."""


def tiny_demos(lengths=LENGTHS, state_dim: int = 4, action_dim: int = 2, cameras: int = 2, height: int = 8,
               width: int = 6, seed: int = 0) -> DemoDataset:
    """Random episodes with every optional field filled: rgb ``[N, H, W, 3 * cameras]`` (None for 0 cameras),
    rewards, success (each episode's last step), seeds 100 + e."""
    rng = np.random.default_rng(seed)
    n = int(sum(lengths))
    episode_index = np.repeat(np.arange(len(lengths)), lengths).astype(np.int64)
    step_index = np.concatenate([np.arange(t) for t in lengths]).astype(np.int64)
    success = np.zeros(n, bool)
    success[np.cumsum(lengths) - 1] = True
    rgb = rng.integers(0, 256, (n, height, width, 3 * cameras), dtype=np.uint8) if cameras else None
    return DemoDataset(obs=rng.normal(size=(n, state_dim)).astype(np.float32),
                       actions=rng.uniform(-1, 1, (n, action_dim)).astype(np.float32),
                       episode_index=episode_index, step_index=step_index, rgb=rgb,
                       rewards=rng.random(n).astype(np.float32), success=success,
                       episode_seeds=100 + np.arange(len(lengths), dtype=np.int64), env_id="Tiny-v1",
                       control_mode="pd_joint_delta_pos", obs_mode="rgb" if cameras else "state")
