"""Gymnasium's own vector env of a ``gym:<id>`` task, the bare loop ``embodied-rl bench env`` measures against: the
env from ``gymnasium.make`` in ``SyncVectorEnv``, with only the space conversion the runtime's actions need
(``spaces.py``: one-hot rows to a Discrete index, [-1, 1] to a bounded Box's range)."""

from __future__ import annotations


def _runtime_spaces(env_id: str, kwargs: dict):
    import gymnasium
    import numpy as np

    from sim_envs.gymnasium_envs.spaces import ActionSpace, ObservationSpace

    class RuntimeSpaces(gymnasium.Wrapper):
        """Observations float32 ``[D]`` and actions ``[A]`` as the runtime's envs take them."""

        def __init__(self, env):
            super().__init__(env)
            self.obs_converter = ObservationSpace(env.observation_space, env_id)
            self.actions = ActionSpace(env.action_space, env_id)
            self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (self.obs_converter.dim,), np.float32)
            self.action_space = gymnasium.spaces.Box(self.actions.low, self.actions.high, (self.actions.dim,),
                                                     np.float32)

        def reset(self, **reset_kwargs):
            obs, info = self.env.reset(**reset_kwargs)
            return self.obs_converter.convert(obs), info

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(self.actions.to_env(self.actions.clip(action)))
            return self.obs_converter.convert(obs), reward, terminated, truncated, info

    return RuntimeSpaces(gymnasium.make(env_id, disable_env_checker=True, **kwargs))


def sync_vector_env(env_id: str, num_envs: int, options: dict):
    """``gymnasium.vector.SyncVectorEnv`` of ``num_envs`` copies of ``env_id`` (with ``options['kwargs']``)."""
    import gymnasium

    kwargs = dict(options.get("kwargs") or {})
    return gymnasium.vector.SyncVectorEnv([lambda: _runtime_spaces(env_id, kwargs) for _ in range(num_envs)])
