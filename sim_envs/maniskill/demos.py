"""ManiSkill's demonstrations behind the family interface (``sim_envs/families.py``).

Sources record state-only episodes in their own control mode: ``motion_planning`` (ManiSkill's planner solutions,
``pd_joint_pos``; the default) and ``checkpoint`` (a trained state policy acting deterministically, in the control
mode it was trained in). When the wanted control mode or observations differ, each kept episode is replayed at once
with ManiSkill's replay code into the output file (converting actions, rendering cameras): cameras render only
there, never while planning.
"""

from __future__ import annotations

from pathlib import Path

from sim_envs.families import DemoEpisode, DemoPlan

SOURCES = ("motion_planning", "checkpoint")
DEFAULT_CONTROL_MODE = "pd_joint_delta_pos"
"""The training envs' default controller (``env.control_mode``), and the demonstrations' unless asked."""


def plan_demos(entry, source: str, control_mode: str | None, policy=None) -> DemoPlan:
    """Validate a request for ``entry`` (a ``TaskEntry``); ``policy``: a loaded checkpoint for source checkpoint."""
    from sim_envs.maniskill.demos_replay import check_conversion
    from sim_envs.maniskill.motion_planning import PLANNER_CONTROL_MODE, planner_env_id

    if source == "motion_planning":
        env_id, source_control_mode = planner_env_id(entry.name), PLANNER_CONTROL_MODE
    else:
        env_id, source_control_mode = entry.env_id, policy.control_mode
    control_mode = control_mode or (DEFAULT_CONTROL_MODE if policy is None else source_control_mode)
    check_conversion(source_control_mode, control_mode)
    return DemoPlan(env_id, source, source_control_mode, control_mode)


class ManiSkillDemoPipeline:
    """A source recorder (``<stem>.h5``) and, when needed, a replayer into the wanted modes."""

    def __init__(self, plan: DemoPlan, obs_mode: str, directory: Path, stem: str, image_size: int = 64,
                 planner_speed: float | None = None, policy=None):
        from sim_envs.maniskill.demos_replay import EpisodeReplayer

        self.plan = plan
        self.policy = policy
        self.source = _open_source(plan, Path(directory), stem, planner_speed, policy)
        self.reward_mode = self.source.options.reward_mode
        needs_replay = obs_mode != "state" or plan.control_mode != plan.source_control_mode
        self.source_trajectory = f"{stem}.h5"
        self.trajectory = (f"{stem}.{obs_mode}.{plan.control_mode}.physx_cpu.h5" if needs_replay
                           else self.source_trajectory)
        self.replayer = None
        if needs_replay:
            self.replayer = EpisodeReplayer(self.source.metadata, Path(directory), Path(self.trajectory).stem,
                                            obs_mode, plan.control_mode, image_size, reward_mode=self.reward_mode)

    def run_episode(self, seed: int, keep_failures: bool) -> DemoEpisode:
        if self.policy is None:
            outcome = self.source.plan_episode(seed)
        else:
            outcome = self.source.run_policy_episode(seed, self.policy.new_episode())
        entry = self.source.keep() if outcome.success or keep_failures else None
        if entry is None:
            self.source.discard()
            return DemoEpisode(outcome, None)
        if self.replayer is None:
            return DemoEpisode(outcome, outcome)
        replayed = self.replayer.replay(self.source.trajectories, entry, keep_failures)
        if replayed is None:
            return DemoEpisode(outcome, None, replay_failed=True)
        return DemoEpisode(outcome, replayed, replay_failed=outcome.success and not replayed.success,
                           replay_seconds=replayed.seconds)

    def close(self) -> None:
        try:
            if self.replayer is not None:
                self.replayer.close()
        finally:
            self.source.close()


def open_demo_pipeline(plan: DemoPlan, obs_mode: str, directory: Path, stem: str, image_size: int = 64,
                       planner_speed: float | None = None, policy=None) -> ManiSkillDemoPipeline:
    return ManiSkillDemoPipeline(plan, obs_mode, directory, stem, image_size, planner_speed, policy)


def _open_source(plan: DemoPlan, directory: Path, stem: str, planner_speed: float | None, policy):
    from sim_envs.maniskill.motion_planning import MotionPlanningRecorder
    from sim_envs.maniskill.options import ManiSkillOptions
    from sim_envs.maniskill.recording import EpisodeRecorder

    if policy is None:
        return MotionPlanningRecorder(plan.env_id, directory, stem,
                                      **({} if planner_speed is None else {"speed": planner_speed}))
    options = ManiSkillOptions(obs_mode="state", control_mode=policy.control_mode, reward_mode=policy.reward_mode,
                               max_episode_steps=policy.max_episode_steps)
    return EpisodeRecorder(plan.env_id, options, directory, stem, source_type="rl",
                           source_desc=f"deterministic actions of the embodied-rl checkpoint {policy.path}")

