"""Gymnasium's own vector envs of a robosuite task over robosuite's own ``GymWrapper``: the bare robosuite loops
``embodied-rl bench env`` measures the runtime against.

Each sub-env is ``robosuite.make`` with the keywords ``sim_envs.make`` uses (``single.make_kwargs``: the same
controller, reward, horizon and ``hard_reset=False``) inside robosuite's ``GymWrapper`` (its flat ``object-state`` +
``robot0_proprio-state`` vector), with success ending an episode and the time limit truncating it as here, stepped by
``gymnasium.vector.SyncVectorEnv`` (one process) or ``AsyncVectorEnv`` (one process per env), same-step autoreset.
A reset seeds robosuite's generator (``single.reseed``): the wrapper's own ``reset(seed)`` seeds numpy's global RNG,
which robosuite 1.5 does not read.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np

from sim_envs.robosuite.options import RobosuiteOptions


def gym_robosuite_env(env_id: str, options: dict):
    """robosuite's ``GymWrapper`` of ``env_id``, ending episodes at success and truncating at the time limit."""
    from sim_envs.robosuite.loader import import_robosuite
    from sim_envs.robosuite.single import make_kwargs, reseed

    robosuite = import_robosuite()
    from robosuite.wrappers import GymWrapper

    parsed = RobosuiteOptions.parse({k: v for k, v in options.items() if k != "seed_stride"})

    class Wrapped(GymWrapper):
        metadata = {"render_modes": []}  # robosuite's is None, which Gymnasium's vector envs copy

        def reset(self, seed=None, options=None):
            reseed(self.env, 0 if seed is None else seed)
            self.elapsed_steps = 0
            return super().reset()

        def step(self, action):
            obs, reward, done, _, info = super().step(action)
            self.elapsed_steps += 1
            success = bool(self.env._check_success())
            terminated = bool(done) or (success and not parsed.ignore_terminations)
            return obs.astype(np.float32), reward, terminated, self.elapsed_steps >= parsed.time_limit, \
                {"success": success}

    with warnings.catch_warnings():  # the wrapper's float64 spaces: Gymnasium warns that it casts them to float32
        warnings.simplefilter("ignore", UserWarning)
        return Wrapped(robosuite.make(**make_kwargs(env_id, parsed)))


def _factories(env_id: str, num_envs: int, options: dict):
    state = dict(options, obs_mode="state", render_size=0)
    return [lambda: gym_robosuite_env(env_id, state) for _ in range(num_envs)]


def sync_vector_env(env_id: str, num_envs: int, options: dict):
    from gymnasium.vector import AutoresetMode

    return gym.vector.SyncVectorEnv(_factories(env_id, num_envs, options), autoreset_mode=AutoresetMode.SAME_STEP)


def async_vector_env(env_id: str, num_envs: int, options: dict):
    from gymnasium.vector import AutoresetMode

    return gym.vector.AsyncVectorEnv(_factories(env_id, num_envs, options), autoreset_mode=AutoresetMode.SAME_STEP,
                                     context="forkserver")
