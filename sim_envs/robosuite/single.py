"""One robosuite env, numpy in and out, with initial states drawn from a seed.

robosuite 1.5 draws every random choice of an episode (object placements through its placement samplers, the arm's
initial joint noise, Wipe's markers, which nut or object a single-object variant uses) from one generator, the env's
``rng``, which its samplers share by reference. Its own seeding is per env (``robosuite.make(..., seed=)``) and its
``GymWrapper.reset(seed)`` seeds ``numpy``'s global RNG, which 1.5 no longer reads. Here every reset sets that shared
generator to ``numpy.random.default_rng(seed)`` in place before robosuite's (soft) reset: one seed, one initial state,
on any machine, in any process and after any earlier episode (``mj_resetData`` clears the physics; the physics after a
reset is deterministic).

The scene is built once (``hard_reset=False``, construction seed ``SCENE_SEED``): resets take ~2 ms instead of ~1 s,
and object sizes (e.g. Lift's cube, 40-44 mm) are those of the construction seed in every env and process.

Episodes end (``terminated``) at the first success step (``env._check_success()``) unless ``ignore_terminations``,
and whenever robosuite ends one itself (Wipe's early terminations); they are truncated at the time limit (500,
robosuite's benchmark horizon, unless ``max_episode_steps``).
"""

from __future__ import annotations

import re

import numpy as np

from sim_envs.errors import TaskConfigError
from sim_envs.robosuite.options import RobosuiteOptions

SCENE_SEED = 0
"""Seed robosuite builds every scene with (what it randomises at construction: object sizes)."""
STATE_KEYS = ("object-state", "robot0_proprio-state")
"""The observation parts the state vector concatenates, in robosuite's ``GymWrapper`` order."""


def make_kwargs(env_id: str, options: RobosuiteOptions) -> dict:
    """``robosuite.make`` keywords of ``env_id`` under ``options`` (shared with the bare reference loop)."""
    from sim_envs.robosuite.loader import controller_config

    return dict(env_name=env_id, robots=options.robot, controller_configs=controller_config(options.control_mode,
                                                                                           options.robot),
                has_renderer=False, has_offscreen_renderer=options.renders, use_camera_obs=False, use_object_obs=True,
                reward_shaping=options.reward_mode != "sparse",
                reward_scale=None if options.reward_mode == "dense" else 1.0, horizon=options.time_limit,
                ignore_done=True, hard_reset=False, seed=SCENE_SEED, **options.kwargs)


def build_raw_env(env_id: str, options: RobosuiteOptions):
    """robosuite's env of ``env_id`` (e.g. ``Lift``); a bad ``kwargs`` key is a one-line TaskConfigError."""
    from sim_envs.robosuite.loader import import_robosuite

    robosuite = import_robosuite(options.renders)
    try:
        return robosuite.make(**make_kwargs(env_id, options))
    except TypeError as error:
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(error))
        if unknown is None:
            raise
        raise TaskConfigError(f"kwargs.{unknown.group(1)} is not a keyword of robosuite's {env_id}") from None


def reseed(env, seed: int) -> None:
    """Set ``env``'s shared generator (its ``rng``, held by its samplers) to ``default_rng(seed)``'s state."""
    env.rng.bit_generator.state = np.random.default_rng(int(seed)).bit_generator.state


def flat_state(raw: dict) -> np.ndarray:
    """robosuite's observation dict -> float32 ``[D]`` (``STATE_KEYS`` concatenated)."""
    return np.concatenate([np.asarray(raw[key], np.float32).ravel() for key in STATE_KEYS if key in raw])


class SingleRobosuiteEnv:
    """One robosuite env; ``step`` returns unbatched numpy (obs ``[D]`` float32 or ``{"rgb", "state"}``).
    ``raw_obs``: robosuite's own observation dict of the current step (what the scripted sources read)."""

    def __init__(self, env_id: str, options: RobosuiteOptions):
        from sim_envs.robosuite.camera import RobosuiteCamera

        self.env_id = env_id
        self.options = options
        self.env = build_raw_env(env_id, options)
        self.max_episode_steps = options.time_limit
        low, high = self.env.action_spec
        self.action_low, self.action_high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        self.action_shape = tuple(self.action_low.shape)
        self.camera = (RobosuiteCamera(self.env, options.image_size, options.camera)
                       if options.obs_mode == "rgb" else None)
        self.video_camera = None
        if options.render_size:
            self.video_camera = (self.camera if self.camera is not None and options.render_size == options.image_size
                                 else RobosuiteCamera(self.env, options.render_size, options.camera))
        self.raw_obs: dict = {}
        self.last_image: np.ndarray | None = None
        self.elapsed_steps = 0
        # The current episode as its seed and its (clipped) actions so far: enough to rebuild its exact state.
        self.episode_seed: int | None = None
        self.episode_actions: list[np.ndarray] = []

    def reset(self, seed: int | None = None):
        """Start the episode of ``seed`` (None: a fresh random seed); returns its first observation."""
        seed = int(np.random.SeedSequence().entropy % 2 ** 31) if seed is None else int(seed)
        reseed(self.env, seed)
        self.raw_obs = self.env.reset()
        self.episode_seed = seed
        self.episode_actions = []
        self.elapsed_steps = 0
        return self._observation(render=True)

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
        self.raw_obs, reward, ended_by_robosuite, _ = self.env.step(action)
        self.elapsed_steps += 1
        success = bool(self.env._check_success())
        terminated = bool(ended_by_robosuite) or (success and not self.options.ignore_terminations)
        truncated = self.elapsed_steps >= self.max_episode_steps and not terminated
        return self._observation(render=observe), float(reward), terminated, truncated, success

    def _observation(self, render: bool):
        state = flat_state(self.raw_obs)
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
        self.env.close()
