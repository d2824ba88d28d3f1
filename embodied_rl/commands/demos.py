"""``embodied-rl demos``: demonstrations of any simulator family in ManiSkill's trajectory format, made once and
cached."""

from __future__ import annotations

from pathlib import Path

from embodied_rl.config import ConfigError


def parse_source(words: list[str] | None) -> tuple[str | None, str | None]:
    """``None`` (the task family's default source), ``['NAME']`` or ``['checkpoint', PATH]`` -> (source, checkpoint
    path). Which names a task takes is its family's (checked by ``resolve_request``)."""
    if not words:
        return None, None
    if len(words) == 1 and words[0] != "checkpoint":
        return words[0], None
    if len(words) == 2 and words[0] == "checkpoint":
        return "checkpoint", words[1]
    raise ConfigError(f"--source {' '.join(words)} is not supported; allowed: a source name (motion_planning for "
                      "ManiSkill, scripted for MetaWorld) or checkpoint PATH")


def parse_observations(text: str) -> tuple[str, ...]:
    """``'state'``, ``'rgb'`` or ``'state,rgb'`` -> a tuple of names, in the order given."""
    names = tuple(word.strip() for word in text.split(",") if word.strip())
    if not names or len(set(names)) != len(names) or not set(names) <= {"state", "rgb"}:
        raise ConfigError(f"--obs={text!r} is not supported; allowed: state, rgb, state,rgb")
    return names


def run_demos(task: str, episodes: int, source_words: list[str] | None, obs: str, control_mode: str | None,
              out: str | None, keep_failures: bool, seed: int, planner_speed: float | None = None) -> int:
    from embodied_rl.demos.cache import ensure_demos
    from embodied_rl.demos.generate import DemoRequest, resolve_request
    from embodied_rl.utils.progress import CountProgress

    source, checkpoint = parse_source(source_words)
    request = DemoRequest(task=task, episodes=episodes, source=source, checkpoint=checkpoint,
                          observations=parse_observations(obs), control_mode=control_mode, seed=seed,
                          keep_failures=keep_failures, planner_speed=planner_speed)
    resolved = resolve_request(request)
    label = (f"{resolved.env_id} {resolved.source.replace('_', ' ')} -> {resolved.obs_mode}, "
             f"{resolved.control_mode}")
    progress = CountProgress(episodes, f"demos {resolved.env_id}", "demos")

    def on_attempt(stats) -> None:
        failed = stats.source_failures + stats.replay_failures
        progress.update(stats.written, f"{stats.attempts} tried, {failed} failed")

    import sim_envs

    try:
        result, hit = ensure_demos(resolved, Path(out) if out else None, on_attempt)
    except sim_envs.TaskConfigError as error:  # no Vulkan, missing assets, a control mode the robot lacks
        raise ConfigError(str(error)) from None
    finally:
        progress.close()
    stats = result.stats
    if hit:
        print(f"demos: {stats.written} {label}: cached (made in {stats.seconds:.1f} s, "
              f"{stats.demos_per_minute:.1f} demos/min)")
    else:
        print(f"demos: {stats.written} {label} in {stats.seconds:.1f} s: {stats.demos_per_minute:.1f} demos/min "
              f"({stats.attempts} episodes tried, {stats.source_failures} failed at the source, "
              f"{stats.replay_failures} failed to replay; {stats.steps:,} steps)")
    print(f"{'found' if hit else 'wrote'} {result.path} (+ {result.path.with_suffix('.json').name})")
    return 0
