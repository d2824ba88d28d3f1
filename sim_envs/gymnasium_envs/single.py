"""One Gymnasium env, numpy in and out, its initial state decided by the seed of ``reset(seed=...)``.

Episodes end (``terminated``) where the env says so (CartPole's pole falls) and are truncated at the time limit:
the env's registered ``max_episode_steps`` unless ``max_episode_steps`` is set. ``success`` is the env's
``info["is_success"]`` (or ``info["success"]``) where it reports one, else False: most Gymnasium envs are scored by
their return.
"""

from __future__ import annotations

import numpy as np

from sim_envs.errors import TaskConfigError
from sim_envs.gymnasium_envs.options import GymnasiumOptions
from sim_envs.gymnasium_envs.spaces import ActionSpace, ObservationSpace


def time_limit(env_id: str, options: GymnasiumOptions) -> int:
    """The episode length of ``env_id`` under ``options``; a TaskConfigError when neither sets one."""
    import gymnasium

    limit = options.max_episode_steps or gymnasium.spec(env_id).max_episode_steps
    if not limit:
        raise TaskConfigError(f"gym:{env_id} has no registered time limit; set env.max_episode_steps")
    return int(limit)


def make_gymnasium_env(env_id: str, options: GymnasiumOptions):
    """``gymnasium.make(env_id, **options.kwargs)`` with the time limit and render mode; a keyword the env does not
    take (or a value it refuses) is a one-line TaskConfigError naming ``env.kwargs.<key>``."""
    import gymnasium

    render_mode = "rgb_array" if options.render_size > 0 else None
    try:
        return gymnasium.make(env_id, max_episode_steps=time_limit(env_id, options), render_mode=render_mode,
                              disable_env_checker=True, **options.kwargs)
    except TaskConfigError:
        raise
    except Exception as error:  # TypeError for an unknown keyword, ValueError/AssertionError for a bad value
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        named = [key for key in options.kwargs if f"'{key}'" in detail or f"{key}" in detail.split()]
        keys = ", ".join(f"env.kwargs.{key}" for key in (named or options.kwargs)) or "env.kwargs"
        raise TaskConfigError(f"{keys}: gym:{env_id} refused {options.kwargs!r} "
                              f"({type(error).__name__}: {detail})") from None


class SingleGymnasiumEnv:
    """One Gymnasium env; ``step`` returns an observation float32 ``[D]`` (see ``spaces.py``)."""

    def __init__(self, env_id: str, options: GymnasiumOptions):
        self.env_id = env_id
        self.options = options
        self.env = make_gymnasium_env(env_id, options)
        self.observation_space = ObservationSpace(self.env.observation_space, env_id)
        self.actions = ActionSpace(self.env.action_space, env_id)
        self.action_shape = (self.actions.dim,)
        self.max_episode_steps = time_limit(env_id, options)
        self.elapsed_steps = 0
        self.episode_seed: int | None = None
        self.episode_actions: list[np.ndarray] = []

    def reset(self, seed: int | None = None) -> np.ndarray:
        seed = int(np.random.SeedSequence().entropy % 2 ** 31) if seed is None else int(seed)
        obs, _ = self.env.reset(seed=seed)
        self.env.action_space.seed(seed)
        self.episode_seed, self.episode_actions, self.elapsed_steps = seed, [], 0
        return self.observation_space.convert(obs)

    def replay(self, seed: int, actions: np.ndarray) -> np.ndarray:
        obs = self.reset(seed)
        for action in actions:
            obs = self.step(np.asarray(action, np.float32))[0]
        return obs

    def step(self, action: np.ndarray, observe: bool = True):
        """action ``[A]`` -> (obs ``[D]``, reward, terminated, truncated, success)."""
        action = self.actions.clip(action)
        self.episode_actions.append(action.copy())
        obs, reward, terminated, truncated, info = self.env.step(self.actions.to_env(action))
        self.elapsed_steps += 1
        success = bool(info.get("is_success", info.get("success", False)))
        terminated = bool(terminated)
        truncated = (bool(truncated) or self.elapsed_steps >= self.max_episode_steps) and not terminated
        reward = float(success) if self.options.reward_mode == "sparse" else float(reward)
        return self.observation_space.convert(obs), reward, terminated, truncated, success

    def render(self) -> np.ndarray:
        if self.options.render_size <= 0:
            raise RuntimeError("this env was built without a renderer: make it with render_size > 0")
        return np.asarray(self.env.render(), np.uint8)

    def close(self) -> None:
        self.env.close()
