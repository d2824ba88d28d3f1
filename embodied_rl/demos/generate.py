"""Make demonstrations of any simulator family: a family's pipeline records episodes (``sim_envs/families.py``),
this module validates the request, runs the loop and counts.

Sources are the family's: ManiSkill ``motion_planning`` (its planner, the default) and ``checkpoint``; MetaWorld
and robosuite ``scripted`` (hand-written policies, the default; robosuite has them for Lift and Door) and
``checkpoint``. Each records state-only episodes in its own control mode, ManiSkill's trajectory format; when the
wanted control mode or observations differ, a ManiSkill episode is replayed at once into the output file (converting
actions, rendering cameras); a MetaWorld or robosuite episode is recorded in the wanted observations directly. Failed episodes are dropped unless ``keep_failures``; the loop runs
until ``episodes`` are written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from embodied_rl.config import ConfigError

SOURCE_NAMES = {"motion_planning": "motionplanning", "checkpoint": "checkpoint", "scripted": "scripted"}
"""Source -> trajectory file stem (ManiSkill names planner demos ``motionplanning``)."""


@dataclass(frozen=True)
class DemoRequest:
    """What to make; two equal requests make the same files (seeded), so they share a cache entry."""

    task: str
    episodes: int
    source: str | None = None
    """None: the task family's default source (ManiSkill: motion_planning; MetaWorld, robosuite: scripted)."""
    checkpoint: str | None = None
    observations: tuple[str, ...] = ("state",)
    control_mode: str | None = None
    """None: the family's default (ManiSkill ``pd_joint_delta_pos``), the policy's own mode for a checkpoint."""
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
    family: str = "maniskill"
    source: str = "motion_planning"
    """The source that makes the demos (the request's, or its family's default)."""

    @property
    def cache_name(self) -> str:
        """``<source>-<control_mode>-<obs>-<N>-seed<S>``: the cache directory of these demos."""
        r = self.request
        source = self.source if self.policy is None else f"checkpoint_{self.policy.digest}"
        name = f"{source}-{self.control_mode}-{self.obs_mode}-{r.episodes}-seed{r.seed}"
        if r.image_size != 64 and "rgb" in self.obs_mode:
            name += f"-{r.image_size}px"
        if r.planner_speed is not None and self.policy is None:
            name += f"-speed{r.planner_speed:g}"
        return name + ("-with-failures" if r.keep_failures else "")

    def describe(self) -> dict:
        r = self.request
        return dict(task=r.task, env_id=self.env_id, source=self.source,
                    checkpoint=None if self.policy is None else str(self.policy.path),
                    checkpoint_digest=None if self.policy is None else self.policy.digest,
                    episodes=r.episodes, seed=r.seed, obs=list(r.observations), obs_mode=self.obs_mode,
                    control_mode=self.control_mode, source_control_mode=self.source_control_mode,
                    keep_failures=r.keep_failures, image_size=r.image_size, planner_speed=r.planner_speed)


def resolve_request(request: DemoRequest) -> ResolvedRequest:
    """Validate ``request`` before anything is built or written; bad input raises a one-line ConfigError."""
    import sim_envs
    from sim_envs.families import get_family
    from sim_envs.maniskill.demos_replay import demo_obs_mode

    if not isinstance(request.episodes, int) or request.episodes < 1:
        raise ConfigError(f"--episodes={request.episodes} is out of range; allowed: an integer >= 1")
    if request.planner_speed is not None and not 0 < request.planner_speed <= 10:
        raise ConfigError(f"planner_speed={request.planner_speed} is out of range; allowed: null (ManiSkill's "
                          "0.9) or joint limits in (0, 10] rad/s")
    if request.image_size < 1:
        raise ConfigError(f"image_size={request.image_size} is out of range; allowed: an integer >= 1")
    try:
        obs_mode = demo_obs_mode(request.observations)
        entry = sim_envs.get_task(request.task)
        try:
            demos = get_family(entry.simulator).demos_module()
        except sim_envs.TaskConfigError:
            raise ConfigError(f"task {request.task!r} ({entry.simulator or 'no simulator'}) has no demonstration "
                              "sources; demonstrations need a ManiSkill, MetaWorld or robosuite task") from None
        source = request.source or demos.SOURCES[0]
        if source not in demos.SOURCES or not entry.env_id:
            allowed = ", ".join(f"{s} PATH" if s == "checkpoint" else s for s in demos.SOURCES)
            raise ConfigError(f"--source {source} is not supported for {request.task}; allowed: {allowed}")
        if request.planner_speed is not None and source != "motion_planning":
            raise ConfigError(f"planner_speed={request.planner_speed} applies to --source motion_planning only")
        policy = None
        if source == "checkpoint":
            if not request.checkpoint:
                raise ConfigError("--source checkpoint needs a PATH (a checkpoint or run directory)")
            from embodied_rl.demos.checkpoint_policy import load_checkpoint_policy

            policy = load_checkpoint_policy(request.checkpoint)
            if policy.task != request.task:
                raise ConfigError(f"--source checkpoint: {policy.path} was trained on task {policy.task!r}, "
                                  f"not {request.task!r}")
        plan = demos.plan_demos(entry, source, request.control_mode, policy)
    except sim_envs.TaskConfigError as error:
        raise ConfigError(str(error)) from None
    return ResolvedRequest(request, plan.env_id, obs_mode, plan.control_mode, plan.source_control_mode, policy,
                           entry.simulator, source)


def generate_demos(resolved: ResolvedRequest, directory: Path,
                   on_attempt: Callable[[DemoStats], None] | None = None,
                   max_attempts: int | None = None) -> DemoResult:
    """Record ``resolved.request.episodes`` demos into ``directory`` (which must exist); returns where and how fast.

    Gives up with a RuntimeError after ``max_attempts`` source episodes (default ``3 * episodes + 10``)."""
    from sim_envs.families import DemoPlan, get_family

    request = resolved.request
    started = time.perf_counter()
    stats = DemoStats()
    plan = DemoPlan(resolved.env_id, resolved.source, resolved.source_control_mode, resolved.control_mode)
    pipeline = get_family(resolved.family).demos_module().open_demo_pipeline(
        plan, resolved.obs_mode, Path(directory), SOURCE_NAMES[resolved.source], request.image_size,
        request.planner_speed, resolved.policy)
    max_attempts = max_attempts or 3 * request.episodes + 10
    try:
        while stats.written < request.episodes:
            if stats.attempts >= max_attempts:
                raise RuntimeError(f"only {stats.written} of {request.episodes} demos after {stats.attempts} "
                                   f"{resolved.source} episodes ({stats.source_failures} failed, "
                                   f"{stats.replay_failures} failed to replay); --keep-failures keeps failures")
            seed = request.seed + stats.attempts
            stats.attempts += 1
            episode = pipeline.run_episode(seed, request.keep_failures)
            stats.record_seconds += episode.source.seconds
            stats.source_failures += not episode.source.success
            stats.replay_failures += episode.replay_failed
            stats.replay_seconds += episode.replay_seconds
            if episode.written is not None:
                _count(stats, episode.written)
            stats.seconds = time.perf_counter() - started
            if on_attempt is not None:
                on_attempt(stats)
    finally:
        pipeline.close()
    stats.seconds = time.perf_counter() - started
    return DemoResult(Path(directory), pipeline.trajectory, pipeline.source_trajectory, resolved.env_id,
                      resolved.obs_mode, resolved.control_mode, stats)


def _count(stats: DemoStats, outcome) -> None:
    stats.written += 1
    stats.successes += outcome.success
    stats.steps += outcome.steps

