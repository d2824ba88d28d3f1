"""The batched environment interface every task adapter provides.

Observations are numpy arrays ``[N, ...]`` (state: float32 ``[N, D]``) or dicts of them
(rgb: ``{"rgb": uint8 [N, H, W, C], "state": float32 [N, D]}``). Environments reset themselves when an
episode ends (same-step autoreset): the observation returned is the first of the new episode and the
last observation of the finished one is in ``StepBatch.final_obs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

Observation = Any  # np.ndarray [N, ...] or dict[str, np.ndarray [N, ...]]


@dataclass
class EpisodeStats:
    """Per-env statistics of episodes that ended at this step; arrays are ``[N]``, valid where ``done``."""

    done: np.ndarray
    episode_return: np.ndarray
    episode_length: np.ndarray
    success_once: np.ndarray
    success_at_end: np.ndarray


@dataclass
class StepBatch:
    """What one ``step`` returns for N envs.

    obs: next observation ``[N, ...]`` (reset observation where an episode ended).
    rewards: float32 ``[N]``. terminated / truncated: bool ``[N]``, kept apart so truncation can bootstrap.
    final_obs: ``[N, ...]``, the last observation of the finished episode where terminated | truncated,
        equal to ``obs`` elsewhere.
    success: bool ``[N]``, the task's success flag at this step (before any reset).
    episodes: stats of episodes that ended at this step.
    """

    obs: Observation
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: Observation
    success: np.ndarray
    episodes: EpisodeStats
    info: dict = field(default_factory=dict)


class VectorEnv(Protocol):
    num_envs: int
    single_action_shape: tuple[int, ...]
    max_episode_steps: int

    def reset(self, seed: int | None = None, state_ids: list[int] | None = None) -> Observation:
        """Reset all envs; ``state_ids[i]`` picks env i's initial state (same id, same initial state: envs of one id
        start from the exact state of the first of them, see ``group_leaders``)."""

    def step(self, actions: np.ndarray, observe: bool = True) -> StepBatch:
        """Step all envs with float32 actions ``[N, A]`` (clipped to the action space). ``observe=False``: nobody
        looks at this step's camera images (a step inside an action chunk), so an env may skip rendering them and
        repeat the last rendered ones; everything else (state, rewards, flags) is fresh."""

    def close(self) -> None: ...


def group_leaders(state_ids) -> np.ndarray:
    """For ``state_ids`` ``[N]``, the index of the first env with each env's id, int ``[N]`` (env i itself where it
    is the first): the leader whose initial state the other envs of its id copy."""
    _, first, inverse = np.unique(np.asarray(state_ids), return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)]


def obs_rows(obs: Observation, index) -> Observation:
    """Select rows ``index`` of an observation (array or dict of arrays)."""
    if isinstance(obs, dict):
        return {k: v[index] for k, v in obs.items()}
    return obs[index]


def set_obs_row(obs: Observation, i: int, row) -> None:
    """Write one env's observation ``row`` into row ``i`` of ``obs`` (array or dict of arrays), in place."""
    if isinstance(obs, dict):
        for k in obs:
            obs[k][i] = row[k]
    else:
        obs[i] = row


def stack_obs(items: list[Observation]) -> Observation:
    """Concatenate observations along the env axis."""
    if isinstance(items[0], dict):
        return {k: np.concatenate([o[k] for o in items], axis=0) for k in items[0]}
    return np.concatenate(items, axis=0)


def copy_obs(obs: Observation) -> Observation:
    if isinstance(obs, dict):
        return {k: v.copy() for k, v in obs.items()}
    return obs.copy()


class EpisodeTracker:
    """Running return / length / success of N envs; ``end(mask)`` reports and clears finished episodes."""

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs, np.float32)
        self.lengths = np.zeros(num_envs, np.int64)
        self.success_once = np.zeros(num_envs, bool)

    def record(self, rewards: np.ndarray, success: np.ndarray, active: np.ndarray | None = None) -> None:
        """One step of every env (of the ``active`` ones: the others did not step)."""
        self.returns += rewards
        self.lengths += 1 if active is None else active.astype(np.int64)
        self.success_once |= success

    def end(self, done: np.ndarray, success: np.ndarray) -> EpisodeStats:
        stats = EpisodeStats(done.copy(), self.returns.copy(), self.lengths.copy(),
                             self.success_once.copy(), success.copy() & done)
        self.returns[done] = 0.0
        self.lengths[done] = 0
        self.success_once[done] = False
        return stats

    def reset_all(self) -> None:
        self.returns[:] = 0.0
        self.lengths[:] = 0
        self.success_once[:] = False
