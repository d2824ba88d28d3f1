"""``embodied-rl export RUN_DIR --format lerobot --out DIR``: a trained run's evaluation episodes as a LeRobot
dataset.

The checkpoint's policy acts deterministically (the Gaussian mean; chunks run open loop) from the run's fixed
evaluation states, seeds ``eval.seed, eval.seed + 1, ...`` (what ``embodied-rl eval`` runs), failures kept, at the
run's time limit (``eval.max_episode_steps``, else ``env.max_episode_steps``, else the task's). It runs through the
demonstration pipeline's ``checkpoint`` source (``embodied-rl demos --source checkpoint``): the policy acts on the
state and each episode is replayed once with the cameras rendered, so the dataset holds the state vector, camera
frames (``--obs``), actions, rewards, success flags and the task's instruction. An episode ends where the env
ends it: at the time limit, or at success where the task terminates on success (ManiSkill's do), whereas
``eval`` runs every episode to the time limit; success within the episode is the same.

Only state policies can act here (a camera policy is refused with one line).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from embodied_rl.config import ConfigError


def resolve_run_checkpoint(run_dir: Path, which: str | None) -> tuple[Path, str]:
    """The checkpoint of ``run_dir`` that ``which`` names (``best``, ``last``, a path; None: best where the run
    kept one, else last), and how it was chosen. A staged run's last stage is used."""
    if which not in (None, "best", "last"):
        path = Path(which)
        if not path.exists():
            raise ConfigError(f"--checkpoint {which}: no such checkpoint")
        return path, "given"
    if not run_dir.is_dir():
        raise ConfigError(f"RUN_DIR {run_dir}: no such directory")
    stage = _last_stage(run_dir)
    best = stage / "best_checkpoint"
    has_best = best.is_dir() and any(best.iterdir())
    if which == "best" and not has_best:
        raise ConfigError(f"--checkpoint best: {stage} kept no best checkpoint (best_checkpoint/); allowed: last or "
                          "a checkpoint PATH")
    if which == "best" or (which is None and has_best):
        return best, "best"
    if not (stage / "checkpoints").is_dir():
        raise ConfigError(f"RUN_DIR {run_dir}: no checkpoints/ (is it a run directory?)")
    return stage, "last"


def _last_stage(run_dir: Path) -> Path:
    """``run_dir`` itself, or the last stage directory of a staged run."""
    if (run_dir / "checkpoints").is_dir() or (run_dir / "best_checkpoint").is_dir():
        return run_dir
    from embodied_rl.analysis.runs import is_run_dir, load_run

    if is_run_dir(run_dir):
        return Path(load_run(run_dir).stages[-1].path)
    return run_dir


def run_export(run_dir: str, out: str, output_format: str = "lerobot", episodes: int | None = None,
               checkpoint: str | None = None, obs: str = "state,rgb", fps: int | None = None,
               image_storage: str = "video") -> int:
    from embodied_rl.commands.demos import check_output_arguments, describe_lerobot, parse_observations
    from embodied_rl.config.loader import from_yaml_file
    from embodied_rl.datasets.lerobot.task_export import write_task_dataset
    from embodied_rl.demos.checkpoint_policy import load_checkpoint_policy
    from embodied_rl.demos.dataset import load_demos
    from embodied_rl.demos.generate import DemoRequest, generate_demos, resolve_request
    from embodied_rl.utils.checkpoint import CONFIG_FILE
    from embodied_rl.utils.progress import CountProgress

    if output_format != "lerobot":
        raise ConfigError(f"--format={output_format!r} is not supported; allowed: lerobot")
    check_output_arguments(out, output_format, image_storage)
    if episodes is not None and episodes < 1:
        raise ConfigError(f"--episodes={episodes} is out of range; allowed: an integer >= 1")
    if fps is not None and fps < 1:
        raise ConfigError(f"--fps={fps} is out of range; allowed: an integer >= 1")
    observations = parse_observations(obs)
    path, chosen = resolve_run_checkpoint(Path(run_dir), checkpoint)
    policy = load_checkpoint_policy(path)
    config = from_yaml_file(policy.path / CONFIG_FILE)
    count = episodes or config.eval.num_episodes
    request = DemoRequest(task=config.task, episodes=count, source="checkpoint", checkpoint=str(policy.path),
                          observations=observations, seed=config.eval.seed, keep_failures=True,
                          image_size=config.env.image_size)
    resolved = resolve_request(request)
    resolved.policy.max_episode_steps = config.eval.max_episode_steps or policy.max_episode_steps
    print(f"export: {count} episodes of {policy.path} ({chosen}) on {config.task}, evaluation states "
          f"{config.eval.seed}..{config.eval.seed + count - 1}", file=sys.stderr, flush=True)
    progress = CountProgress(count, f"export {resolved.env_id}", "episodes")
    import sim_envs

    with tempfile.TemporaryDirectory(prefix="embodied-rl-export-") as scratch:
        try:
            result = generate_demos(resolved, Path(scratch), lambda stats: progress.update(stats.written))
        except sim_envs.TaskConfigError as error:
            raise ConfigError(str(error)) from None
        finally:
            progress.close()
        demos = load_demos(result.path)
    written = write_task_dataset(demos, config.task, out, fps, image_storage)
    stats = result.stats
    seeds = demos.episode_seeds.tolist()
    print(f"export: {stats.written} episodes ({stats.successes} succeeded), seeds {seeds[0]}..{seeds[-1]}, "
          f"{stats.steps:,} steps in {stats.seconds:.1f} s")
    print(describe_lerobot(written))
    return 0
