"""Env worker: owns simulator envs, asks rollout workers for actions through a channel, emits trajectories."""

from __future__ import annotations

import numpy as np

import sim_envs
from embodied_rl.runtime import Worker
from embodied_rl.workers.messages import (REQUESTS_KEY, TRAJECTORIES_KEY, PolicyRequest, Trajectory,
                                          responses_key)
from sim_envs.vector_env import obs_rows


class EnvWorker(Worker):
    """Steps ``envs_per_worker`` envs of ``task``; env i of rank r starts from seed ``seed + r * k + i``."""

    def __init__(self, task: str, envs_per_worker: int, env_options: dict, channel, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.task = task
        self.channel = channel
        self.num_envs = envs_per_worker
        self.env_options = dict(env_options)
        self.env = sim_envs.make(task, envs_per_worker, processes=False,
                                 seed=seed + self.rank * envs_per_worker, **self.env_options)
        self.eval_env = None
        self.eval_seed = 10_000_000 + seed + self.rank * envs_per_worker
        self.obs = self.env.reset()
        self.pending_final: np.ndarray | None = None  # env indices whose final obs still need a value
        self.pending_final_obs = None
        self.channel.subscribe(responses_key(self.rank))

    def observation_shape(self):
        if isinstance(self.obs, dict):
            return {k: v.shape[1:] for k, v in self.obs.items()}
        return self.obs.shape[1:]

    def action_shape(self):
        return self.env.single_action_shape

    def _ask(self, obs, final_obs, deterministic=False, want_actions=True):
        self.channel.put(PolicyRequest(self.rank, obs, final_obs, deterministic, want_actions), REQUESTS_KEY)
        return self.channel.get(responses_key(self.rank))

    def interact(self, num_steps: int) -> list[dict]:
        """Run ``num_steps`` steps, put a ``Trajectory`` on the channel, return stats of finished episodes."""
        T, b = num_steps, self.num_envs
        obs_buf = np.zeros((T, *self.obs.shape), self.obs.dtype)
        actions = np.zeros((T, b, *self.env.single_action_shape), np.float32)
        logp = np.zeros((T, b), np.float32)
        values = np.zeros((T, b), np.float32)
        rewards = np.zeros((T, b), np.float32)
        terminated = np.zeros((T, b), bool)
        truncated = np.zeros((T, b), bool)
        final_values = np.zeros((T, b), np.float32)
        versions = np.zeros(T, np.int64)
        episodes: list[dict] = []
        pending = None  # (step, env indices) whose final-observation value comes with the next response
        final_obs = None
        for t in range(T + 1):
            response = self._ask(self.obs, final_obs, want_actions=t < T)
            if pending is not None:
                step, index = pending
                final_values[step, index] = response.final_values
            if t == T:
                next_value = response.values
                break
            obs_buf[t] = self.obs
            actions[t], logp[t], values[t] = response.actions, response.logp, response.values
            versions[t] = response.policy_version
            batch = self.env.step(response.actions)
            rewards[t], terminated[t], truncated[t] = batch.rewards, batch.terminated, batch.truncated
            episodes.extend(_finished_episodes(batch))
            ended = np.flatnonzero(batch.truncated | batch.terminated)
            pending = (t, ended) if len(ended) else None
            final_obs = obs_rows(batch.final_obs, ended) if len(ended) else None
            self.obs = batch.obs
        self.channel.put(Trajectory(obs_buf, actions, logp, values, rewards, terminated, truncated,
                                    final_values, next_value, versions, self.rank), TRAJECTORIES_KEY)
        return episodes

    def evaluate(self, num_episodes: int) -> list[dict]:
        """Run ``num_episodes`` full-length episodes per env worker with deterministic actions."""
        if self.eval_env is None:
            options = dict(self.env_options, ignore_terminations=True)
            self.eval_env = sim_envs.make(self.task, self.num_envs, processes=False, seed=self.eval_seed, **options)
        obs = self.eval_env.reset(seed=self.eval_seed)
        self.eval_seed += 7919 * self.num_envs
        finished: list[dict] = []
        quota = np.full(self.num_envs, num_episodes // self.num_envs)
        quota[: num_episodes % self.num_envs] += 1
        while (quota > 0).any():
            response = self._ask(obs, None, deterministic=True)
            batch = self.eval_env.step(response.actions)
            for i, stats in zip(np.flatnonzero(batch.episodes.done), _finished_episodes(batch)):
                if quota[i] > 0:
                    finished.append(stats)
                    quota[i] -= 1
            obs = batch.obs
        return finished

    def close(self) -> None:
        self.env.close()
        if self.eval_env is not None:
            self.eval_env.close()


def _finished_episodes(batch) -> list[dict]:
    e = batch.episodes
    return [dict(episode_return=float(e.episode_return[i]), episode_length=int(e.episode_length[i]),
                 success_once=bool(e.success_once[i]), success_at_end=bool(e.success_at_end[i]))
            for i in np.flatnonzero(e.done)]
