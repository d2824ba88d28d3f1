"""Make demonstrations: a source records episodes, a replay turns them into the wanted control and obs mode.

Sources (each records state-only episodes in its own control mode, ManiSkill's format):

* ``motion_planning``: ManiSkill's planner solutions, ``pd_joint_pos``.
* ``checkpoint``: a trained state policy acting deterministically, in the control mode it was trained in.

Episodes stream one at a time: record (no rendering), and when the wanted control mode or observations differ,
replay that episode at once into the output file (converting actions, rendering cameras). Failed episodes are
dropped unless ``keep_failures``; the loop runs until ``episodes`` are written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from embodied_rl.config import ConfigError

SOURCES = ("motion_planning", "checkpoint")
DEFAULT_CONTROL_MODE = "pd_joint_delta_pos"
"""The training envs' default controller (``env.control_mode``)."""
SOURCE_NAMES = {"motion_planning": "motionplanning", "checkpoint": "checkpoint"}
"""Source -> trajectory file stem (ManiSkill names planner demos ``motionplanning``)."""


@dataclass(frozen=True)
class DemoRequest:
    """What to make; two equal requests make the same files (seeded), so they share a cache entry."""

    task: str
    episodes: int
    source: str = "motion_planning"
    checkpoint: str | None = None
    observations: tuple[str, ...] = ("state",)
    control_mode: str | None = None
    """None: ``pd_joint_delta_pos`` for motion planning, the policy's own mode for a checkpoint."""
    seed: int = 0
    keep_failures: bool = False
    image_size: int = 64
    planner_speed: float | None = None
    """Joint velocity and acceleration limits of the motion planner (rad/s, rad/s^2); None: ManiSkill's (0.9).
    Faster plans make shorter demonstrations (PickCube: ~52 steps at 2.0 against ~75)."""


@dataclass
class DemoStats:
    attempts: int = 0
    written: int = 0
    successes: int = 0
    """Written episodes that end in success (all of them unless keep_failures)."""
    source_failures: int = 0
    replay_failures: int = 0
    steps: int = 0
    seconds: float = 0.0
    record_seconds: float = 0.0
    replay_seconds: float = 0.0

    @property
    def demos_per_minute(self) -> float:
        return 60.0 * self.written / self.seconds if self.seconds > 0 else 0.0


@dataclass
class DemoResult:
    directory: Path
    trajectory: str
    """File name of the demos as requested (``.h5``; the ``.json`` beside it)."""
    source_trajectory: str
    """File name of the source's own recording (the same file when no replay was needed)."""
    env_id: str
    obs_mode: str
    control_mode: str
    stats: DemoStats = field(default_factory=DemoStats)

    @property
    def path(self) -> Path:
        return self.directory / self.trajectory


@dataclass
class ResolvedRequest:
    """A validated request: env id, ManiSkill obs mode, control modes, and the loaded policy if any."""

    request: DemoRequest
    env_id: str
    obs_mode: str
    control_mode: str
    source_control_mode: str
    policy: object | None = None

    @property
    def cache_name(self) -> str:
        """``<source>-<control_mode>-<obs>-<N>-seed<S>``: the cache directory of these demos."""
        r = self.request
        source = r.source if self.policy is None else f"checkpoint_{self.policy.digest}"
        name = f"{source}-{self.control_mode}-{self.obs_mode}-{r.episodes}-seed{r.seed}"
        if r.image_size != 64 and "rgb" in self.obs_mode:
            name += f"-{r.image_size}px"
        if r.planner_speed is not None and self.policy is None:
            name += f"-speed{r.planner_speed:g}"
        return name + ("-with-failures" if r.keep_failures else "")

    def describe(self) -> dict:
        r = self.request
        return dict(task=r.task, env_id=self.env_id, source=r.source,
                    checkpoint=None if self.policy is None else str(self.policy.path),
                    checkpoint_digest=None if self.policy is None else self.policy.digest,
                    episodes=r.episodes, seed=r.seed, obs=list(r.observations), obs_mode=self.obs_mode,
                    control_mode=self.control_mode, source_control_mode=self.source_control_mode,
                    keep_failures=r.keep_failures, image_size=r.image_size, planner_speed=r.planner_speed)


def resolve_request(request: DemoRequest) -> ResolvedRequest:
    """Validate ``request`` before anything is built or written; bad input raises a one-line ConfigError."""
    import sim_envs
    from sim_envs.maniskill.demos_replay import check_conversion, demo_obs_mode
    from sim_envs.maniskill.motion_planning import PLANNER_CONTROL_MODE, planner_env_id

    if not isinstance(request.episodes, int) or request.episodes < 1:
        raise ConfigError(f"--episodes={request.episodes} is out of range; allowed: an integer >= 1")
    if request.source not in SOURCES:
        raise ConfigError(f"--source={request.source!r} is not supported; allowed: motion_planning, checkpoint PATH")
    if request.planner_speed is not None and not 0 < request.planner_speed <= 10:
        raise ConfigError(f"planner_speed={request.planner_speed} is out of range; allowed: null (ManiSkill's "
                          "0.9) or joint limits in (0, 10] rad/s")
    if request.planner_speed is not None and request.source != "motion_planning":
        raise ConfigError(f"planner_speed={request.planner_speed} applies to --source motion_planning only")
    if request.image_size < 1:
        raise ConfigError(f"image_size={request.image_size} is out of range; allowed: an integer >= 1")
    try:
        obs_mode = demo_obs_mode(request.observations)
        entry = sim_envs.get_task(request.task)
        if entry.simulator != "maniskill" or not entry.env_id:
            raise ConfigError(f"task {request.task!r} is not a ManiSkill task; demonstrations need one")
        policy = None
        if request.source == "motion_planning":
            env_id = planner_env_id(request.task)
            source_control_mode = PLANNER_CONTROL_MODE
        else:
            if not request.checkpoint:
                raise ConfigError("--source checkpoint needs a PATH (a checkpoint or run directory)")
            from embodied_rl.demos.checkpoint_policy import load_checkpoint_policy

            policy = load_checkpoint_policy(request.checkpoint)
            if policy.task != request.task:
                raise ConfigError(f"--source checkpoint: {policy.path} was trained on task {policy.task!r}, "
                                  f"not {request.task!r}")
            env_id = entry.env_id
            source_control_mode = policy.control_mode
        control_mode = request.control_mode or (DEFAULT_CONTROL_MODE if policy is None else source_control_mode)
        check_conversion(source_control_mode, control_mode)
    except sim_envs.TaskConfigError as error:
        raise ConfigError(str(error)) from None
    return ResolvedRequest(request, env_id, obs_mode, control_mode, source_control_mode, policy)


def generate_demos(resolved: ResolvedRequest, directory: Path,
                   on_attempt: Callable[[DemoStats], None] | None = None,
                   max_attempts: int | None = None) -> DemoResult:
    """Record ``resolved.request.episodes`` demos into ``directory`` (which must exist); returns where and how fast.

    Gives up with a RuntimeError after ``max_attempts`` source episodes (default ``3 * episodes + 10``)."""
    from sim_envs.maniskill.demos_replay import EpisodeReplayer

    request = resolved.request
    stem = SOURCE_NAMES[request.source]
    started = time.perf_counter()
    stats = DemoStats()
    source = _open_source(resolved, Path(directory), stem)
    needs_replay = resolved.obs_mode != "state" or resolved.control_mode != resolved.source_control_mode
    trajectory = (f"{stem}.{resolved.obs_mode}.{resolved.control_mode}.physx_cpu.h5" if needs_replay
                  else f"{stem}.h5")
    replayer = None
    max_attempts = max_attempts or 3 * request.episodes + 10
    try:
        if needs_replay:
            replayer = EpisodeReplayer(source.metadata, Path(directory), Path(trajectory).stem, resolved.obs_mode,
                                       resolved.control_mode, request.image_size,
                                       reward_mode=source.options.reward_mode)
        while stats.written < request.episodes:
            if stats.attempts >= max_attempts:
                raise RuntimeError(f"only {stats.written} of {request.episodes} demos after {stats.attempts} "
                                   f"{request.source} episodes ({stats.source_failures} failed, "
                                   f"{stats.replay_failures} failed to replay); --keep-failures keeps failures")
            seed = request.seed + stats.attempts
            stats.attempts += 1
            outcome = _run_source_episode(resolved, source, seed)
            stats.record_seconds += outcome.seconds
            stats.source_failures += not outcome.success
            entry = source.keep() if outcome.success or request.keep_failures else None
            if entry is None:
                source.discard()
            elif replayer is None:
                _count(stats, outcome)
            else:
                replayed = replayer.replay(source.trajectories, entry, request.keep_failures)
                if replayed is None:
                    stats.replay_failures += 1
                else:
                    stats.replay_seconds += replayed.seconds
                    stats.replay_failures += outcome.success and not replayed.success
                    _count(stats, replayed)
            stats.seconds = time.perf_counter() - started
            if on_attempt is not None:
                on_attempt(stats)
    finally:
        if replayer is not None:
            replayer.close()
        source.close()
    stats.seconds = time.perf_counter() - started
    return DemoResult(Path(directory), trajectory, f"{stem}.h5", resolved.env_id, resolved.obs_mode,
                      resolved.control_mode, stats)


def _count(stats: DemoStats, outcome) -> None:
    stats.written += 1
    stats.successes += outcome.success
    stats.steps += outcome.steps


def _open_source(resolved: ResolvedRequest, directory: Path, stem: str):
    from sim_envs.maniskill.options import ManiSkillOptions
    from sim_envs.maniskill.recording import EpisodeRecorder
    from sim_envs.maniskill.motion_planning import MotionPlanningRecorder

    if resolved.policy is None:
        speed = resolved.request.planner_speed
        return MotionPlanningRecorder(resolved.env_id, directory, stem,
                                      **({} if speed is None else {"speed": speed}))
    policy = resolved.policy
    options = ManiSkillOptions(obs_mode="state", control_mode=policy.control_mode, reward_mode=policy.reward_mode,
                               max_episode_steps=policy.max_episode_steps)
    return EpisodeRecorder(resolved.env_id, options, directory, stem, source_type="rl",
                           source_desc=f"deterministic actions of the embodied-rl checkpoint {policy.path}")


def _run_source_episode(resolved: ResolvedRequest, source, seed: int):
    if resolved.policy is None:
        return source.plan_episode(seed)
    return source.run_policy_episode(seed, resolved.policy.new_episode())
