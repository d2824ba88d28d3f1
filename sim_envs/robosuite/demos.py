"""robosuite demonstrations behind the family interface (``sim_envs/families.py``).

Sources: ``scripted`` (the default: this package's hand-written waypoint controllers, ``scripted.py``, acting in
``osc_pose`` on robosuite's observation dict; Lift and Door) and ``checkpoint`` (a trained state policy acting
deterministically). Nothing is converted: an episode is recorded once, in the wanted observations (camera images
rendered live), and written in ManiSkill's trajectory format (``sim_envs/trajectory_file.py``).

An episode runs until its first success step or the time limit (500 steps). Measured on seeds 0-99 (robosuite 1.5.2,
Panda, ``osc_pose``): Lift 100/100 succeed, 36 steps on average (3,622 in all); Door 100/100, 99 steps on average
(9,884 in all).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim_envs.errors import TaskConfigError
from sim_envs.families import DemoEpisode, DemoPlan
from sim_envs.robosuite.options import CONTROL_MODES, DEFAULT_MAX_EPISODE_STEPS, RobosuiteOptions
from sim_envs.robosuite.scripted import SCRIPTS

SOURCES = ("scripted", "checkpoint")
DEFAULT_CONTROL_MODE = CONTROL_MODES[0]
SCRIPTED_CONTROL_MODE = "osc_pose"
REWARD_MODE = "normalized_dense"
"""The reward recorded with the demonstrations (the training envs' default)."""


def plan_demos(entry, source: str, control_mode: str | None, policy=None) -> DemoPlan:
    """Validate a request for ``entry`` (a ``TaskEntry``); ``policy``: a loaded checkpoint for source checkpoint."""
    control_mode = control_mode or (policy.control_mode if policy is not None else DEFAULT_CONTROL_MODE)
    if control_mode not in CONTROL_MODES:
        raise TaskConfigError(f"control mode {control_mode!r} is not robosuite's; allowed: {', '.join(CONTROL_MODES)}")
    if policy is not None and policy.control_mode != control_mode:
        raise TaskConfigError(f"the checkpoint acts in {policy.control_mode!r}, not {control_mode!r}")
    if source == "scripted":
        if entry.env_id not in SCRIPTS:
            raise TaskConfigError(f"{entry.name} has no scripted policy; scripted robosuite tasks: "
                                  f"{', '.join(sorted(SCRIPTS))} (or --source checkpoint PATH)")
        if control_mode != SCRIPTED_CONTROL_MODE:
            raise TaskConfigError(f"the scripted robosuite policies act in {SCRIPTED_CONTROL_MODE} only, not "
                                  f"{control_mode!r}")
    return DemoPlan(entry.env_id, source, control_mode, control_mode)


class RobosuiteDemoPipeline:
    """Records source episodes straight into ``<directory>/<stem>.{h5,json}``."""

    def __init__(self, plan: DemoPlan, obs_mode: str, directory: Path, stem: str, image_size: int = 64,
                 policy=None, max_episode_steps: int | None = None):
        from sim_envs.robosuite.single import SingleRobosuiteEnv
        from sim_envs.trajectory_file import TrajectoryWriter

        limit = max_episode_steps or (policy.max_episode_steps if policy is not None else None) \
            or DEFAULT_MAX_EPISODE_STEPS
        self.options = RobosuiteOptions(obs_mode="state" if obs_mode == "state" else "rgb", image_size=image_size,
                                        control_mode=plan.control_mode, reward_mode=REWARD_MODE,
                                        max_episode_steps=limit)
        self.env = SingleRobosuiteEnv(plan.env_id, self.options)
        self.reward_mode = REWARD_MODE
        self.policy = policy
        self.script = SCRIPTS[plan.env_id]() if policy is None else None
        self.trajectory = self.source_trajectory = f"{stem}.h5"
        kwargs = dict(obs_mode=obs_mode, control_mode=plan.control_mode, reward_mode=REWARD_MODE,
                      image_size=image_size, camera=self.options.camera, robot=self.options.robot)
        source_desc = (f"embodied-rl's scripted robosuite policy (sim_envs/robosuite/scripted.py, "
                       f"{type(self.script).__name__})" if policy is None
                       else f"deterministic actions of the embodied-rl checkpoint {policy.path}")
        self.writer = TrajectoryWriter(Path(directory), stem,
                                       {"env_id": plan.env_id, "env_kwargs": kwargs, "max_episode_steps": limit},
                                       "scripted" if policy is None else "rl", source_desc)

    def _act(self):
        """``act(obs)``: the next action ``[A]`` from the current observation."""
        if self.policy is not None:
            decide = self.policy.new_episode()
            return lambda obs: decide(obs["state"] if isinstance(obs, dict) else obs)
        self.script.reset()
        return lambda obs: self.script(self.env.raw_obs)

    def run_episode(self, seed: int, keep_failures: bool) -> DemoEpisode:
        from sim_envs.trajectory_file import record_episode

        return record_episode(self.env, self._act(), seed, self.writer, keep_failures)

    def close(self) -> None:
        try:
            self.writer.close()
        finally:
            self.env.close()


def open_demo_pipeline(plan: DemoPlan, obs_mode: str, directory: Path, stem: str, image_size: int = 64,
                       planner_speed: float | None = None, policy=None) -> RobosuiteDemoPipeline:
    if planner_speed is not None:
        raise TaskConfigError("planner_speed applies to ManiSkill's motion planner only; robosuite's scripted "
                              "policies have none")
    return RobosuiteDemoPipeline(plan, obs_mode, directory, stem, image_size, policy)
