"""One MetaWorld (v3) env, numpy in and out, with initial states drawn from a seed.

MetaWorld randomises each task's object and goal positions through one vector per episode (``_last_rand_vec``,
drawn from the task's ``_random_reset_space``); its MT1 benchmark fixes 50 of them per seed. Here every reset draws
the vector with the task's own sampler from ``numpy.random.default_rng(seed)``: one seed, one initial state, on any
machine and in any process (the physics after a reset is deterministic), independent of MetaWorld's global
``np.random`` use. The goal is observable (``_partially_observable = False``, MetaWorld's MT setting): a policy
sees where to go.

Episodes end (``terminated``) at the first success step unless ``ignore_terminations``, and are truncated at the
time limit (MetaWorld's ``max_path_length``, 500, unless ``max_episode_steps``).
"""

from __future__ import annotations

import numpy as np

from sim_envs.errors import TaskConfigError
from sim_envs.metaworld.options import MetaWorldOptions


def env_class(env_id: str):
    """MetaWorld's class of ``env_id`` (e.g. ``reach-v3``); a TaskConfigError naming the ids otherwise."""
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS

    if env_id not in ALL_V3_ENVIRONMENTS:
        raise TaskConfigError(f"{env_id!r} is not a MetaWorld v3 env; allowed: {', '.join(ALL_V3_ENVIRONMENTS)}")
    return ALL_V3_ENVIRONMENTS[env_id]


def build_raw_env(env_id: str):
    """MetaWorld's env of ``env_id`` with the goal observable, ready for ``reset_to(env, seed)``."""
    env = env_class(env_id)()
    env._partially_observable = False
    del env.sawyer_observation_space  # a cached property that depends on the observability
    env._set_task_called = True
    return env


def reset_to(env, seed: int) -> np.ndarray:
    """Reset ``env`` (from ``build_raw_env``) to the initial state of ``seed``; returns MetaWorld's obs ``[39]``.

    The task draws its random vector with its own sampler (some tasks redraw until, e.g., the goal is far enough
    from the object) from a generator seeded with ``seed`` alone."""
    env._freeze_rand_vec = False
    env.seeded_rand_vec = True
    env.np_random = np.random.default_rng(int(seed))
    obs, _ = env.reset()
    return obs


class SingleMetaWorldEnv:
    """One MetaWorld env; ``step`` returns unbatched numpy (obs ``[39]`` float32 or ``{"rgb", "state"}``)."""

    def __init__(self, env_id: str, options: MetaWorldOptions):
        from sim_envs.metaworld.camera import MujocoCamera

        if options.renders:
            from sim_envs.mujoco_gl import select_gl_backend

            select_gl_backend()  # before MuJoCo's first GL context in this process
        self.env_id = env_id
        self.options = options
        self.env = build_raw_env(env_id)
        self.max_episode_steps = options.time_limit
        self.env.max_path_length = max(self.max_episode_steps, 1)  # MetaWorld refuses steps past it
        self.action_shape = tuple(self.env.action_space.shape)
        self.action_low = self.env.action_space.low
        self.action_high = self.env.action_space.high
        self.camera = (MujocoCamera(self.env, options.image_size, options.camera)
                       if options.obs_mode == "rgb" else None)
        self.video_camera = None
        if options.render_size:
            self.video_camera = (self.camera if self.camera is not None and options.render_size == options.image_size
                                 else MujocoCamera(self.env, options.render_size, options.camera))
        self.last_image: np.ndarray | None = None
        self.elapsed_steps = 0
        # The current episode as its seed and its (clipped) actions so far: enough to rebuild its exact state.
        self.episode_seed: int | None = None
        self.episode_actions: list[np.ndarray] = []

    def reset(self, seed: int | None = None):
        """Start the episode of ``seed`` (None: a fresh random seed); returns its first observation."""
        seed = int(np.random.SeedSequence().entropy % 2 ** 31) if seed is None else int(seed)
        state = reset_to(self.env, seed)
        self.episode_seed = seed
        self.episode_actions = []
        self.elapsed_steps = 0
        return self._observation(state, render=True)

    def replay(self, seed: int, actions: np.ndarray):
        """Rebuild an episode from its seed and its actions so far ``[t, A]``; returns the last observation."""
        obs = self.reset(seed)
        for t, action in enumerate(actions):
            obs = self.step(np.asarray(action, np.float32), observe=t == len(actions) - 1)[0]
        return obs

    def step(self, action: np.ndarray, observe: bool = True):
        """action ``[A]`` -> (obs, reward, terminated, truncated, success). ``observe=False``: the camera image is
        the last rendered one (no render; the state part is fresh)."""
        action = np.clip(np.asarray(action, np.float32), self.action_low, self.action_high)
        self.episode_actions.append(action.copy())
        state, reward, _, _, info = self.env.step(action)
        self.elapsed_steps += 1
        success = bool(info["success"])
        terminated = success and not self.options.ignore_terminations
        truncated = self.elapsed_steps >= self.max_episode_steps and not terminated
        return self._observation(state, render=observe), self._reward(float(reward), success), terminated, \
            truncated, success

    def _reward(self, reward: float, success: bool) -> float:
        mode = self.options.reward_mode
        if mode == "sparse":
            return float(success)
        return reward / 10.0 if mode == "normalized_dense" else reward

    def _observation(self, state: np.ndarray, render: bool):
        state = np.asarray(state, np.float32)
        if self.camera is None:
            return state
        if render or self.last_image is None:
            self.last_image = self.camera.capture()
        return {"rgb": self.last_image, "state": state}

    def render(self) -> np.ndarray:
        """The current scene from ``options.camera``: uint8 ``[H, W, 3]`` (needs ``render_size`` > 0)."""
        if self.video_camera is None:
            raise RuntimeError("this env was built without a renderer: make it with render_size > 0 "
                               "(e.g. sim_envs.make(task, n, render_size=128))")
        return self.video_camera.capture()

    def close(self) -> None:
        for camera in {id(c): c for c in (self.camera, self.video_camera) if c is not None}.values():
            camera.close()
        self.env.close()
