"""Fills one env group's ``[T, b]`` trajectory arrays step by step (array or dict observations; a dict may hold
string arrays, e.g. the language instruction ``[b]``, stored as numpy unicode ``[T, b]``)."""

from __future__ import annotations

import numpy as np

from embodied_rl.workers.messages import Trajectory


def _empty_like_obs(obs, steps: int):
    if isinstance(obs, dict):
        return {k: np.zeros((steps, *v.shape), v.dtype) for k, v in obs.items()}
    return np.zeros((steps, *obs.shape), obs.dtype)


def _store(buffer, t: int, obs) -> None:
    if isinstance(buffer, dict):
        for k in obs:  # the env's parts; the buffer may also hold what the policy stored (record_policy)
            value = np.asarray(obs[k])
            if value.dtype.kind == "U" and value.dtype.itemsize > buffer[k].dtype.itemsize:
                buffer[k] = buffer[k].astype(value.dtype)  # a longer string than any before: widen, never cut
            buffer[k][t] = value
    else:
        buffer[t] = obs


def concat_obs(parts: list, axis: int):
    if isinstance(parts[0], dict):
        return {k: np.concatenate([p[k] for p in parts], axis=axis) for k in parts[0]}
    return np.concatenate(parts, axis=axis)


class TrajectoryBuffer:
    """``T`` steps of ``b`` envs. ``final_values[t]`` arrives with the response after step t (see PolicyRequest)."""

    def __init__(self, steps: int, first_obs, action_shape: tuple[int, ...], store_next_obs: bool = False):
        b = len(first_obs["state"] if isinstance(first_obs, dict) else first_obs)
        self.obs = _empty_like_obs(first_obs, steps)
        self.next_obs = _empty_like_obs(first_obs, steps) if store_next_obs else None
        self.actions = np.zeros((steps, b, *action_shape), np.float32)
        self.logp = np.zeros((steps, b), np.float32)
        self.values = np.zeros((steps, b), np.float32)
        self.rewards = np.zeros((steps, b), np.float32)
        self.terminated = np.zeros((steps, b), bool)
        self.truncated = np.zeros((steps, b), bool)
        self.success = np.zeros((steps, b), bool)
        self.final_values = np.zeros((steps, b), np.float32)
        self.versions = np.zeros(steps, np.int64)
        self.next_value = np.zeros(b, np.float32)

    def record_policy(self, t: int, obs, response) -> None:
        """The observation of decision ``t`` and the policy's answer; what the policy stored of its decision
        (``response.stored``, keys ``stored.*``) joins the observation dict (buffers made at the first decision)."""
        _store(self.obs, t, obs)
        if response.stored:
            if not isinstance(self.obs, dict):
                raise TypeError("a policy that stores parts of its decisions needs dict observations")
            steps = len(self.actions)
            for k, v in response.stored.items():
                if k not in self.obs:
                    self.obs[k] = np.zeros((steps, *v.shape), v.dtype)
                self.obs[k][t] = v
        self.actions[t], self.logp[t], self.values[t] = response.actions, response.logp, response.values
        self.versions[t] = response.policy_version

    def record_step(self, t: int, batch) -> None:
        self.rewards[t], self.terminated[t], self.truncated[t] = batch.rewards, batch.terminated, batch.truncated
        self.success[t] = batch.success
        if self.next_obs is not None:
            _store(self.next_obs, t, batch.final_obs)  # the episode's last observation where it ended, else obs

    def to_trajectory(self, env_rank: int) -> Trajectory:
        return Trajectory(self.obs, self.actions, self.logp, self.values, self.rewards, self.terminated,
                          self.truncated, self.success, self.final_values, self.next_value, self.versions, env_rank,
                          next_obs=self.next_obs)


def merge_stages(parts: list[Trajectory], env_rank: int) -> Trajectory:
    """Concatenate per-stage trajectories of one env worker along the env axis."""
    if len(parts) == 1:
        return parts[0]
    cat = lambda name: np.concatenate([getattr(p, name) for p in parts], axis=1)  # noqa: E731
    versions = np.min(np.stack([p.policy_versions for p in parts]), axis=0)
    next_obs = concat_obs([p.next_obs for p in parts], axis=1) if parts[0].next_obs is not None else None
    return Trajectory(concat_obs([p.obs for p in parts], axis=1), cat("actions"), cat("logp"), cat("values"),
                      cat("rewards"), cat("terminated"), cat("truncated"), cat("success"), cat("final_values"),
                      np.concatenate([p.next_value for p in parts]), versions, env_rank, next_obs=next_obs)
