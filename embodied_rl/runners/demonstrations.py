"""The demonstrations an SFT stage trains on: generated (and cached) or read from a path, as flat arrays."""

from __future__ import annotations

from pathlib import Path

from embodied_rl.config.errors import ConfigError
from embodied_rl.config.schema import TrainConfig


def demonstrations_path(config: TrainConfig) -> Path:
    """The ``.h5`` file of the demonstrations ``config.algorithm`` asks for, generating them if not cached."""
    a = config.algorithm
    if a.demo_source == "path":
        path = Path(a.demo_path)
        if not path.is_file():
            raise ConfigError(f"algorithm.demo_path={a.demo_path!r}: no such file")
        return path
    from embodied_rl.demos.cache import cached_demonstrations

    return cached_demonstrations(config.task, source=a.demo_source, episodes=a.demo_episodes,
                                 control_mode=config.env.control_mode, obs=config.env.obs_mode, seed=config.seed)


def load_sft_demonstrations(config: TrainConfig) -> dict:
    """``{"obs": [N, ...], "actions": [N, A]}`` of every demonstrated step."""
    from embodied_rl.demos.dataset import load_demonstrations

    data = load_demonstrations(demonstrations_path(config))
    return {"obs": data["obs"], "actions": data["actions"]}
