"""Demonstrations from ManiSkill's own motion-planning solutions (``mani_skill.examples.motionplanning.panda``).

The solutions plan with mplib and drive the Panda in ``pd_joint_pos`` on the CPU sim. We run them the way
ManiSkill's ``motionplanning/panda/run.py`` does: the env wrapped in ``RecordEpisode``, one seed per episode,
successful episodes flushed to the ``.h5``. Planning is state-only (no rendering: ~0.3 s per PushCube episode
against ~5 s with cameras); camera observations and other control modes come from replaying the file
(``sim_envs.maniskill.demos_replay``).

mplib 0.1.1 (pinned by mani_skill 3.0.1) segfaults with numpy 2: keep numpy < 2.
"""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path
from typing import Callable

from sim_envs.errors import TaskConfigError
from sim_envs.maniskill.options import ManiSkillOptions
from sim_envs.maniskill.recording import EpisodeOutcome, EpisodeRecorder

PLANNER_SOLUTIONS = {
    "PickCube-v1": "solvePickCube",
    "PushCube-v1": "solvePushCube",
    "StackCube-v1": "solveStackCube",
    "PullCube-v1": "solvePullCube",
    "PegInsertionSide-v1": "solvePegInsertionSide",
    "PlugCharger-v1": "solvePlugCharger",
    "PlaceSphere-v1": "solvePlaceSphere",
    "PullCubeTool-v1": "solvePullCubeTool",
    "LiftPegUpright-v1": "solveLiftPegUpright",
    "StackPyramid-v1": "solveStackPyramid",
    "DrawTriangle-v1": "solveDrawTriangle",
    "DrawSVG-v1": "solveDrawSVG",
}
"""ManiSkill env id -> its solution in ``mani_skill.examples.motionplanning.panda.solutions``."""

PLANNER_SPEED = 0.9
"""ManiSkill's joint velocity and acceleration limits for its planner (``PandaArmMotionPlanningSolver``; rad/s,
rad/s^2). Measured on PickCube-v1, 20 seeds: 0.9 -> 75 steps on average, all succeed; 2.0 -> 52 (first success
at 33-60 steps, 9 of 20 within 50), all succeed; 3.0 -> 43, 15 of 20 succeed (the arm overshoots)."""

PLANNER_CONTROL_MODE = "pd_joint_pos"
PLANNER_MAX_EPISODE_STEPS = 500
"""Time limit while planning: solutions run past tasks' own limits (PickCube ~77 steps against its 50)."""


def planner_tasks() -> list[str]:
    """Registered tasks whose env has a motion-planning solution."""
    from sim_envs.registry import get_task, list_tasks

    return [name for name in list_tasks() if get_task(name).env_id in PLANNER_SOLUTIONS]


def planner_env_id(task_name: str) -> str:
    """The env id of ``task_name``; a TaskConfigError (one line naming the tasks that have one) without a planner."""
    from sim_envs.registry import get_task

    env_id = get_task(task_name).env_id
    if env_id not in PLANNER_SOLUTIONS:
        raise TaskConfigError(f"task {task_name!r} has no motion-planning solution; tasks with one: "
                              f"{', '.join(planner_tasks())}")
    return env_id


def _solution(env_id: str):
    from mani_skill.examples.motionplanning.panda import solutions

    return getattr(solutions, PLANNER_SOLUTIONS[env_id])


class MotionPlanningRecorder(EpisodeRecorder):
    """A state-only ``pd_joint_pos`` recorder whose episodes are ManiSkill's planner solutions."""

    def __init__(self, env_id: str, directory: Path, name: str, reward_mode: str = "normalized_dense",
                 max_episode_steps: int = PLANNER_MAX_EPISODE_STEPS, speed: float = PLANNER_SPEED):
        if env_id not in PLANNER_SOLUTIONS:
            raise TaskConfigError(f"{env_id} has no motion-planning solution; envs with one: "
                                  f"{', '.join(sorted(PLANNER_SOLUTIONS))}")
        options = ManiSkillOptions(obs_mode="state", control_mode=PLANNER_CONTROL_MODE, reward_mode=reward_mode,
                                   max_episode_steps=max_episode_steps)
        super().__init__(env_id, options, directory, name, source_type="motionplanning",
                         source_desc="official motion planning solution from ManiSkill contributors")
        self.solve = _solution(env_id)
        self.speed = float(speed)

    def plan_episode(self, seed: int) -> EpisodeOutcome:
        """Reset with ``seed`` and run the solution; the episode stays buffered (keep or discard it).

        A planner that raises or finds no plan is a failed episode, as in ManiSkill's ``run.py``."""
        started = time.perf_counter()
        try:
            with contextlib.redirect_stdout(io.StringIO()), planner_speed(self.solve, self.speed):
                # (the planner prints "screw plan failed" and retries)
                result = self.solve(self.env, seed=int(seed), debug=False, vis=False)
        except Exception:  # noqa: BLE001  (mplib and the solutions raise bare exceptions on unreachable poses)
            result = -1
        if isinstance(result, int):  # the solutions return -1 when no plan is found
            steps = int(self.base_env.elapsed_steps.reshape(-1)[0]) if hasattr(self.base_env, "elapsed_steps") else 0
            return EpisodeOutcome(int(seed), False, steps, time.perf_counter() - started)
        info = result[-1]
        return EpisodeOutcome(int(seed), bool(info["success"].reshape(-1)[0]),
                              int(info["elapsed_steps"].reshape(-1)[0]), time.perf_counter() - started)


@contextlib.contextmanager
def planner_speed(solve, speed: float):
    """While inside, ``solve`` (a solution function) builds its planner with joint velocity and acceleration
    limits ``speed`` instead of ManiSkill's defaults: the solutions construct ``PandaArmMotionPlanningSolver``
    themselves, so the name in their module is swapped for a subclass with other defaults, then put back."""
    import sys

    module = sys.modules[solve.__module__]
    original = getattr(module, "PandaArmMotionPlanningSolver", None)
    if original is None or speed == PLANNER_SPEED:
        yield
        return

    class Solver(original):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("joint_vel_limits", speed)
            kwargs.setdefault("joint_acc_limits", speed)
            super().__init__(*args, **kwargs)

    module.PandaArmMotionPlanningSolver = Solver
    try:
        yield
    finally:
        module.PandaArmMotionPlanningSolver = original


def record_planned_episodes(env_id: str, num_episodes: int, directory: Path, name: str = "motionplanning",
                            seed: int = 0, keep_failures: bool = False, max_attempts: int | None = None,
                            on_episode: Callable[[EpisodeOutcome, bool], None] | None = None,
                            speed: float = PLANNER_SPEED) -> list[EpisodeOutcome]:
    """Plan and record ``num_episodes`` episodes of ``env_id`` into ``directory/name.{h5,json}``.

    Seeds ``seed, seed + 1, ...``; the planner moves at ``speed`` (``PLANNER_SPEED``); failed plans are dropped (kept with ``keep_failures``: then exactly
    ``num_episodes`` are attempted). Gives up with a RuntimeError after ``max_attempts`` (default
    ``2 * num_episodes + 10``). ``on_episode(outcome, kept)`` is called after each attempt. Returns all attempts.
    """
    max_attempts = max_attempts or 2 * num_episodes + 10
    recorder = MotionPlanningRecorder(env_id, directory, name, speed=speed)
    attempts: list[EpisodeOutcome] = []
    try:
        while recorder.kept < num_episodes:
            if len(attempts) >= max_attempts:
                raise RuntimeError(f"only {recorder.kept} of {len(attempts)} planned {env_id} episodes succeeded "
                                   f"(wanted {num_episodes})")
            outcome = recorder.plan_episode(seed + len(attempts))
            attempts.append(outcome)
            kept = (outcome.success or keep_failures) and recorder.keep() is not None
            if not kept:
                recorder.discard()
            if on_episode is not None:
                on_episode(outcome, kept)
    finally:
        recorder.close()
    return attempts
