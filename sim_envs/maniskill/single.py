"""One ManiSkill env on the CPU backend, with numpy in and out (ManiSkill's CPU sim allows one env per scene)."""

from __future__ import annotations

import numpy as np

from sim_envs.maniskill.ood_splits import OodSplit
from sim_envs.maniskill.options import ManiSkillOptions, check_assets, quiet_maniskill, translate_simulator_error
from sim_envs.maniskill.rendering import render_frames, with_render_camera


def _to_numpy(value):
    if isinstance(value, dict):
        return {k: _to_numpy(v) for k, v in value.items()}
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def build_gym_env(env_id: str, options: ManiSkillOptions, num_envs: int = 1, sim_backend: str = "physx_cpu"):
    """``gym.make`` of a ManiSkill env with our options; rgb observations flattened to ``{"rgb", "state"}``.

    ``obs_mode='state+rgb'`` (used for demonstrations, not by ``sim_envs.make``) gives ``{"rgb", "state"}`` with
    the full privileged state vector of ``obs_mode='state'`` as ``state``.
    """
    quiet_maniskill()
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401  (registers ManiSkill's envs)
    from mani_skill.utils.wrappers.flatten import FlattenRGBDObservationWrapper

    check_assets(env_id)
    kwargs = dict(num_envs=num_envs, obs_mode=options.obs_mode, control_mode=options.control_mode,
                  reward_mode=options.reward_mode, sim_backend=sim_backend,
                  reconfiguration_freq=options.reconfiguration_freq)
    if options.max_episode_steps is not None:
        kwargs["max_episode_steps"] = options.max_episode_steps
    cameras = "rgb" in options.obs_mode.split("+")  # 'rgb', or 'state+rgb' (recorded demonstrations)
    if cameras:
        kwargs["sensor_configs"] = dict(width=options.image_size, height=options.image_size)
    else:
        kwargs["render_backend"] = "none"
    kwargs = with_render_camera(kwargs, options.render_size)
    try:
        env = gym.make(env_id, **kwargs)
    except RuntimeError as error:
        raise translate_simulator_error(error) from error
    if cameras:
        env = FlattenRGBDObservationWrapper(env, rgb=True, depth=False, state=True)
    return env


class SingleCpuEnv:
    """A single ManiSkill CPU env; ``step`` returns unbatched numpy (obs ``[D]`` or dict, reward float)."""

    def __init__(self, env_id: str, options: ManiSkillOptions):
        self.env = build_gym_env(env_id, options)
        self.ignore_terminations = options.ignore_terminations
        self.max_episode_steps = find_max_episode_steps(self.env)
        self.action_shape = tuple(self.env.unwrapped.single_action_space.shape)
        self.action_low = self.env.unwrapped.single_action_space.low
        self.action_high = self.env.unwrapped.single_action_space.high
        self.sensor_cache = SensorCache(self.env.unwrapped) if "rgb" in options.obs_mode.split("+") else None
        # The current episode as its seed and the (clipped) actions taken since its reset: enough to rebuild its
        # exact state in another process (``replay``), as CPU PhysX steps are deterministic.
        self.episode_seed: int | None = None
        self.episode_actions: list[np.ndarray] = []
        self.ood_split = None if options.ood_split is None else OodSplit(options.ood_split, env_id,
                                                                          self.env.unwrapped)

    def reset(self, seed: int | None = None, state: dict | None = None):
        """Start an episode from ``seed``; with ``state`` (another env's ``get_state()``), from that state in place
        of the task's own draw (the seed still sets the episode's random generators). Returns its observation."""
        options = {} if state is None else {"reset_to_env_states": {"env_states": state}}
        if self.ood_split is not None and self.ood_split.before_reset(seed):
            options["reconfigure"] = True
        try:
            obs, _ = self.env.reset(seed=seed, options=options or None)
        except RuntimeError as error:
            raise translate_simulator_error(error) from error
        if self.ood_split is not None and state is None and self.ood_split.after_reset():
            obs = self._observe()
        self.episode_seed = None if seed is None else int(seed)
        self.episode_actions = []
        return _unbatch(_to_numpy(obs))

    def _observe(self):
        """The observation of the current state, as ``reset`` and ``step`` return it (batched, wrappers applied)."""
        obs = self.env.unwrapped.get_obs()
        wrapper = self.env
        while wrapper is not self.env.unwrapped:  # e.g. FlattenRGBDObservationWrapper
            if hasattr(wrapper, "observation") and callable(wrapper.observation):
                return wrapper.observation(obs)
            wrapper = wrapper.env
        return obs

    def get_state(self) -> dict:
        """The simulator's full state, ManiSkill's state dict: torch tensors ``[1, D]`` by actor and articulation
        (pose, velocities; joint positions and velocities)."""
        return self.env.unwrapped.get_state_dict()

    def align_with(self, leader: "SingleCpuEnv", seed: int):
        """After ``reset(seed)``: start from ``leader``'s exact state where the seed alone did not give it (exact up
        to ~1e-8 m of round-off in the robot's root pose, which is why the seed goes first). Returns the new
        observation, or None when the states were already equal."""
        state = leader.get_state()
        if _equal_states(self.get_state(), state):
            return None
        return self.reset(seed=seed, state=state)

    def replay(self, seed: int, actions: np.ndarray):
        """Rebuild an episode from its seed and its actions so far ``[t, A]`` (see ``episode_actions``); returns
        the observation after the last one, as ``step`` returned it then."""
        obs = self.reset(seed)
        for t, action in enumerate(actions):
            obs = self.step(np.asarray(action, np.float32), observe=t == len(actions) - 1)[0]
        return obs

    def step(self, action: np.ndarray, observe: bool = True):
        """action ``[A]`` -> (obs, reward, terminated, truncated, success). ``observe=False``: the camera images
        are the last rendered ones (no render; the state part is fresh)."""
        action = np.clip(action, self.action_low, self.action_high)[None]
        if self.ood_split is not None:
            self.ood_split.before_step(len(self.episode_actions))
        self.episode_actions.append(action[0].copy())
        if self.sensor_cache is not None:
            self.sensor_cache.render_next = observe
        obs, reward, terminated, truncated, info = self.env.step(action)
        success = bool(_to_numpy(info["success"]).reshape(-1)[0]) if "success" in info else False
        terminated = bool(_to_numpy(terminated).reshape(-1)[0])
        if self.ignore_terminations:
            terminated = False
        return (_unbatch(_to_numpy(obs)), float(_to_numpy(reward).reshape(-1)[0]), terminated,
                bool(_to_numpy(truncated).reshape(-1)[0]), success)

    def render(self) -> np.ndarray:
        """The current scene from the human render camera: uint8 ``[H, W, 3]`` (needs ``render_size`` > 0)."""
        return render_frames(self.env)[0]

    def close(self) -> None:
        self.env.close()


class SensorCache:
    """Wraps a ManiSkill env's sensor capture (``_get_obs_sensor_data``: render + read back, the cost of a camera
    step on CPU) so that a step can reuse the last captured images instead (``render_next = False``). Resets and
    steps with ``render_next = True`` capture for real."""

    def __init__(self, unwrapped_env):
        self.capture = unwrapped_env._get_obs_sensor_data
        self.last = None
        self.render_next = True
        self.renders = self.reuses = 0
        unwrapped_env._get_obs_sensor_data = self._sensor_data

    def _sensor_data(self, *args, **kwargs):
        if self.render_next or self.last is None:
            self.last = self.capture(*args, **kwargs)
            self.renders += 1
        else:
            self.reuses += 1
        self.render_next = True  # only the step asked for skips; a reset inside it renders
        return self.last


def find_max_episode_steps(env) -> int:
    """The time limit ManiSkill's TimeLimitWrapper enforces (it is not on ``env.spec``)."""
    while env is not None:
        limit = getattr(env, "_max_episode_steps", None)
        if limit:
            return int(limit)
        env = getattr(env, "env", None)
    raise ValueError("environment has no time limit")


def _equal_states(a: dict, b: dict) -> bool:
    """Whether two ManiSkill state dicts hold the same tensors, bit for bit."""
    return a.keys() == b.keys() and all(
        _equal_states(a[k], b[k]) if isinstance(a[k], dict) else np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def _unbatch(obs):
    if isinstance(obs, dict):
        return {k: v[0] for k, v in obs.items()}
    return obs[0]
