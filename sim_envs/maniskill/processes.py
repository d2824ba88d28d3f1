"""N ManiSkill CPU envs in N processes through Gymnasium's AsyncVectorEnv (the loop ManiSkill's CPU baseline uses)."""

from __future__ import annotations

import numpy as np

from sim_envs.maniskill.options import ManiSkillOptions
from sim_envs.maniskill.rewards import build_env
from sim_envs.vector_env import EpisodeTracker, StepBatch, copy_obs


def _make_cpu_gym_env(env_id: str, options: ManiSkillOptions):
    from mani_skill.utils.wrappers.gymnasium import CPUGymWrapper

    return CPUGymWrapper(build_env(env_id, options), ignore_terminations=options.ignore_terminations)


def make_async_vector_env(env_id: str, num_envs: int, options: ManiSkillOptions):
    """Gymnasium ``AsyncVectorEnv`` of ``num_envs`` single-env processes with same-step autoreset.

    Gymnasium 1.x defaults to next-step autoreset, which silently drops the truncation bootstrap of code written
    for 0.29; same-step autoreset puts the last observation of an ended episode in ``info["final_obs"]``.
    """
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    fns = [lambda: _make_cpu_gym_env(env_id, options) for _ in range(num_envs)]
    return gym.vector.AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP, context="forkserver")


def reference_async_vector_env(env_id: str, num_envs: int, options: dict):
    """The bench baseline (``sim_envs/families.py``): what ManiSkill's CPU PPO steps, ``AsyncVectorEnv`` of
    ``num_envs`` env processes built from ``options`` (``sim_envs.make`` keyword arguments)."""
    return make_async_vector_env(env_id, num_envs, ManiSkillOptions.parse(options))


class ProcessManiSkillEnvs:
    """``VectorEnv`` over an AsyncVectorEnv: one process per env, stepped in parallel."""

    def __init__(self, env_id: str, num_envs: int, options: ManiSkillOptions):
        self.num_envs = num_envs
        self.options = options
        self.vector_env = make_async_vector_env(env_id, num_envs, options)
        self.single_action_shape = tuple(self.vector_env.single_action_space.shape)
        self.max_episode_steps = _max_steps(env_id, options)
        self._low = self.vector_env.single_action_space.low
        self._high = self.vector_env.single_action_space.high
        self.tracker = EpisodeTracker(num_envs)

    def reset(self, seed: int | None = None, state_ids: list[int] | None = None):
        if state_ids is not None and len(state_ids) != self.num_envs:
            raise ValueError(f"state_ids has {len(state_ids)} entries for {self.num_envs} envs")
        base = self.options.seed if seed is None else seed
        seeds = [int(s) for s in state_ids] if state_ids is not None else [base + i for i in range(self.num_envs)]
        obs, _ = self.vector_env.reset(seed=seeds)
        self.tracker.reset_all()
        return obs

    def step(self, actions: np.ndarray, observe: bool = True) -> StepBatch:  # every step renders (AsyncVectorEnv)
        obs, rewards, terminated, truncated, info = self.vector_env.step(np.clip(actions, self._low, self._high))
        rewards = np.asarray(rewards, np.float32)
        terminated = np.asarray(terminated, bool)
        truncated = np.asarray(truncated, bool)
        done = terminated | truncated
        success = np.zeros(self.num_envs, bool)
        final_obs = obs
        if "success" in info:
            success = np.asarray(info["success"], bool) & info.get("_success", True)
        if done.any():
            final_obs = copy_obs(obs)
            final_info = info.get("final_info", {})
            for i in np.flatnonzero(done):
                row = info["final_obs"][i]
                if isinstance(final_obs, dict):
                    for k in final_obs:
                        final_obs[k][i] = row[k]
                else:
                    final_obs[i] = row
                if "success" in final_info:
                    success[i] = bool(final_info["success"][i])
        self.tracker.record(rewards, success)
        episodes = self.tracker.end(done, success)
        return StepBatch(obs, rewards, terminated, truncated, final_obs, success, episodes)

    def close(self) -> None:
        self.vector_env.close()


def _max_steps(env_id: str, options: ManiSkillOptions) -> int:
    if options.max_episode_steps is not None:
        return options.max_episode_steps
    from mani_skill.utils.registration import REGISTERED_ENVS

    return int(REGISTERED_ENVS[env_id].max_episode_steps)
