"""MetaWorld demonstrations behind the family interface (``sim_envs/families.py``).

Sources: ``scripted`` (the default: MetaWorld's hand-written policy of the task, ``metaworld.policies``, acting on
the state vector) and ``checkpoint`` (a trained state policy acting deterministically). MetaWorld has one control
mode, so nothing is converted: the episode is recorded once, in the wanted observations (camera images rendered
live, at ~0.09 s a frame on a CPU), and written in ManiSkill's trajectory format (``sim_envs/trajectory_file.py``).

An episode runs until its first success step (the env's termination) or the time limit (500 steps, MetaWorld's
``max_path_length``); the scripted policies solve most tasks in 40-200 steps.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim_envs.errors import TaskConfigError
from sim_envs.families import DemoEpisode, DemoPlan
from sim_envs.metaworld.options import CONTROL_MODES, DEFAULT_MAX_EPISODE_STEPS, MetaWorldOptions

SOURCES = ("scripted", "checkpoint")
DEFAULT_CONTROL_MODE = CONTROL_MODES[0]
REWARD_MODE = "normalized_dense"
"""The reward recorded with the demonstrations (the training envs' default)."""


def scripted_policy(env_id: str):
    """MetaWorld's scripted policy of ``env_id``: ``get_action(obs [39]) -> action [4]``."""
    from metaworld.policies import ENV_POLICY_MAP

    if env_id not in ENV_POLICY_MAP:
        raise TaskConfigError(f"{env_id} has no scripted policy in metaworld.policies")
    return ENV_POLICY_MAP[env_id]()


def plan_demos(entry, source: str, control_mode: str | None, policy=None) -> DemoPlan:
    """Validate a request for ``entry`` (a ``TaskEntry``); ``policy``: a loaded checkpoint for source checkpoint."""
    control_mode = control_mode or DEFAULT_CONTROL_MODE
    if control_mode not in CONTROL_MODES:
        raise TaskConfigError(f"control mode {control_mode!r} is not MetaWorld's; allowed: {', '.join(CONTROL_MODES)}")
    if policy is not None and policy.control_mode != control_mode:
        raise TaskConfigError(f"the checkpoint acts in {policy.control_mode!r}; MetaWorld tasks take "
                              f"{', '.join(CONTROL_MODES)}")
    return DemoPlan(entry.env_id, source, control_mode, control_mode)


class MetaWorldDemoPipeline:
    """Records source episodes straight into ``<directory>/<stem>.{h5,json}``."""

    def __init__(self, plan: DemoPlan, obs_mode: str, directory: Path, stem: str, image_size: int = 64,
                 policy=None, max_episode_steps: int | None = None):
        from sim_envs.metaworld.single import SingleMetaWorldEnv
        from sim_envs.trajectory_file import TrajectoryWriter

        limit = max_episode_steps or (policy.max_episode_steps if policy is not None else None) \
            or DEFAULT_MAX_EPISODE_STEPS
        self.options = MetaWorldOptions(obs_mode="state" if obs_mode == "state" else "rgb", image_size=image_size,
                                        reward_mode=REWARD_MODE, max_episode_steps=limit)
        self.env = SingleMetaWorldEnv(plan.env_id, self.options)
        self.reward_mode = REWARD_MODE
        self.policy = policy
        self.scripted = scripted_policy(plan.env_id) if policy is None else None
        self.trajectory = self.source_trajectory = f"{stem}.h5"
        kwargs = dict(obs_mode=obs_mode, control_mode=plan.control_mode, reward_mode=REWARD_MODE,
                      image_size=image_size, camera=self.options.camera)
        source_desc = ("MetaWorld's scripted policy (metaworld.policies)" if policy is None
                       else f"deterministic actions of the embodied-rl checkpoint {policy.path}")
        self.writer = TrajectoryWriter(Path(directory), stem,
                                       {"env_id": plan.env_id, "env_kwargs": kwargs, "max_episode_steps": limit},
                                       "scripted" if policy is None else "rl", source_desc)

    def _act(self):
        if self.policy is not None:
            return self.policy.new_episode()
        scripted = self.scripted
        return lambda obs: scripted.get_action(np.asarray(obs, np.float64))

    def run_episode(self, seed: int, keep_failures: bool) -> DemoEpisode:
        import warnings

        from sim_envs.trajectory_file import record_episode

        act = self._act()
        with warnings.catch_warnings():  # the scripted policies warn when their gains exceed the action range
            warnings.simplefilter("ignore", UserWarning)
            return record_episode(self.env, lambda obs: act(obs["state"] if isinstance(obs, dict) else obs),
                                  seed, self.writer, keep_failures)

    def close(self) -> None:
        try:
            self.writer.close()
        finally:
            self.env.close()


def open_demo_pipeline(plan: DemoPlan, obs_mode: str, directory: Path, stem: str, image_size: int = 64,
                       planner_speed: float | None = None, policy=None) -> MetaWorldDemoPipeline:
    if planner_speed is not None:
        raise TaskConfigError("planner_speed applies to ManiSkill's motion planner only; MetaWorld's scripted "
                              "policies have none")
    return MetaWorldDemoPipeline(plan, obs_mode, directory, stem, image_size, policy)
