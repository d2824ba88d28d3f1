"""A trained checkpoint as a deterministic expert: ``act(obs [D]) -> action [A]`` plus the env it was trained in."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from embodied_rl.config import ConfigError


@dataclass
class CheckpointPolicy:
    decide: Callable[[np.ndarray], np.ndarray]
    """State vector ``[D]`` -> the Gaussian mean: action ``[A]``, or a chunk ``[K, A]`` for a chunking policy."""
    path: Path
    """The resolved checkpoint directory."""
    digest: str
    """First 12 hex digits of the weights' sha256 (names the demos made from these weights)."""
    task: str
    control_mode: str
    reward_mode: str
    max_episode_steps: int | None

    def new_episode(self) -> Callable[[np.ndarray], np.ndarray]:
        """``act(obs [D]) -> action [A]`` for one episode: a chunk of K actions runs open loop, the policy is asked
        again when it is used up (as the env workers run chunks)."""
        pending: list[np.ndarray] = []

        def act(obs: np.ndarray) -> np.ndarray:
            if not pending:
                decision = np.asarray(self.decide(obs), np.float32)
                pending.extend(decision if decision.ndim == 2 else [decision])
            return pending.pop(0)

        return act


def load_checkpoint_policy(path: str | Path) -> CheckpointPolicy:
    """Load ``model.safetensors`` + ``config.yaml`` + ``counters.json`` of a checkpoint (or a run's latest).

    User-fixable problems (no checkpoint there, no policy spec, a camera policy) raise a one-line ConfigError."""
    import torch

    from embodied_rl.config.loader import from_yaml_file
    from embodied_rl.models import build_policy
    from embodied_rl.utils.checkpoint import CONFIG_FILE, WEIGHTS_FILE, load_checkpoint
    from embodied_rl.workers.weights import load_host_weights

    try:
        checkpoint = load_checkpoint(Path(path))
    except FileNotFoundError as error:
        raise ConfigError(f"--source checkpoint: {error}") from None
    if not (checkpoint.path / CONFIG_FILE).is_file():
        raise ConfigError(f"--source checkpoint: {checkpoint.path} has no {CONFIG_FILE}")
    spec = checkpoint.counters.get("policy_spec")
    if not spec:
        raise ConfigError(f"--source checkpoint: {checkpoint.path} records no policy_spec in counters.json")
    config = from_yaml_file(checkpoint.path / CONFIG_FILE)
    if config.env.obs_mode != "state":
        raise ConfigError(f"--source checkpoint: the policy observes {config.env.obs_mode!r}; only state policies "
                          "can replay here (record camera demos from a state expert with --obs rgb)")
    policy = build_policy(**spec)
    load_host_weights(policy, checkpoint.weights)
    policy.eval()

    def decide(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            actions = policy.act(torch.as_tensor(np.asarray(obs, np.float32)[None]), deterministic=True)[0]
        return actions[0].cpu().numpy()

    digest = hashlib.sha256((checkpoint.path / WEIGHTS_FILE).read_bytes()).hexdigest()[:12]
    return CheckpointPolicy(decide, checkpoint.path, digest, config.task, config.env.control_mode,
                            config.env.reward_mode, config.env.max_episode_steps)
