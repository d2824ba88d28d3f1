"""``embodied-rl demos``: demonstrations of any simulator family in ManiSkill's trajectory format, made once and
cached; with ``--format lerobot``, also written as a LeRobotDataset v3 directory (``--out``)."""

from __future__ import annotations

from pathlib import Path

from embodied_rl.config import ConfigError

FORMATS = ("h5", "lerobot")
"""``--format``: ManiSkill's trajectory files (the default) or a LeRobot dataset."""
IMAGE_STORAGES = ("video", "image")
"""``--image-storage`` of a LeRobot dataset: lossless mp4 per camera, or PNG frames in the parquet."""


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


def check_output_arguments(out: str | None, output_format: str, image_storage: str = "video") -> None:
    """Refuse a ``--format``/``--out``/``--image-storage`` combination before anything is made (one line)."""
    if output_format not in FORMATS:
        raise ConfigError(f"--format={output_format!r} is not supported; allowed: {', '.join(FORMATS)}")
    if image_storage not in IMAGE_STORAGES:
        raise ConfigError(f"--image-storage={image_storage!r} is not supported; allowed: {', '.join(IMAGE_STORAGES)}")
    if output_format != "lerobot":
        return
    if not out:
        raise ConfigError("--format lerobot needs --out DIR (the dataset directory to create)")
    path = Path(out)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ConfigError(f"--out {path} already exists and is not empty; choose a new directory (nothing was written)")


def run_demos(task: str, episodes: int, source_words: list[str] | None, obs: str, control_mode: str | None,
              out: str | None, keep_failures: bool, seed: int, planner_speed: float | None = None,
              output_format: str = "h5", fps: int | None = None, image_storage: str = "video") -> int:
    from embodied_rl.demos.cache import ensure_demos
    from embodied_rl.demos.generate import DemoRequest, resolve_request
    from embodied_rl.utils.progress import CountProgress

    check_output_arguments(out, output_format, image_storage)
    if fps is not None and fps < 1:
        raise ConfigError(f"--fps={fps} is out of range; allowed: an integer >= 1")
    cache_root = Path(out) if out and output_format == "h5" else None
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
        result, hit = ensure_demos(resolved, cache_root, on_attempt)
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
    if output_format == "lerobot":
        from embodied_rl.datasets.lerobot.task_export import write_task_dataset
        from embodied_rl.demos.dataset import load_demos

        written = write_task_dataset(load_demos(result.path), task, out, fps, image_storage)
        print(describe_lerobot(written))
    return 0


def describe_lerobot(written) -> str:
    """One line about a LeRobot dataset just written (a ``WriteResult``)."""
    cameras = f"cameras {', '.join(written.cameras)}" if written.cameras else "no cameras"
    return (f"wrote LeRobot dataset {written.path}: {written.episodes} episodes, {written.frames:,} frames, "
            f"{cameras}")
