"""Gymnasium's own vector envs of a MetaWorld task: the baselines ``embodied-rl bench env`` measures against.

Each sub-env is MetaWorld's env as a plain ``gymnasium.Env`` (the same seeded initial states, termination at
success and time limit as ``sim_envs.make``, state observations), stepped by ``gymnasium.vector.SyncVectorEnv``
(one process, one env after another) or ``AsyncVectorEnv`` (one process per env), with same-step autoreset.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from sim_envs.metaworld.options import MetaWorldOptions


class GymMetaWorldEnv(gym.Env):
    """One MetaWorld env of ``env_id`` as a Gymnasium env (state observations ``[39]`` float32)."""

    def __init__(self, env_id: str, options: dict):
        from sim_envs.metaworld.single import SingleMetaWorldEnv

        parsed = MetaWorldOptions.parse({k: v for k, v in options.items() if k != "seed_stride"})
        self.env = SingleMetaWorldEnv(env_id, parsed)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (39,), np.float32)
        self.action_space = gym.spaces.Box(self.env.action_low, self.env.action_high, dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return self.env.reset(seed), {}

    def step(self, action):
        obs, reward, terminated, truncated, success = self.env.step(action)
        return obs, reward, terminated, truncated, {"success": success}

    def close(self):
        self.env.close()


def _factories(env_id: str, num_envs: int, options: dict):
    state = dict(options, obs_mode="state", render_size=0)
    return [lambda: GymMetaWorldEnv(env_id, state) for _ in range(num_envs)]


def sync_vector_env(env_id: str, num_envs: int, options: dict):
    from gymnasium.vector import AutoresetMode

    return gym.vector.SyncVectorEnv(_factories(env_id, num_envs, options), autoreset_mode=AutoresetMode.SAME_STEP)


def async_vector_env(env_id: str, num_envs: int, options: dict):
    from gymnasium.vector import AutoresetMode

    return gym.vector.AsyncVectorEnv(_factories(env_id, num_envs, options), autoreset_mode=AutoresetMode.SAME_STEP,
                                     context="forkserver")
