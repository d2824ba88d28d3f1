"""``embodied-rl eval``: run a checkpoint's policy (greedily unless ``eval.greedy=false``) and report
success rates."""

from __future__ import annotations

import json
from pathlib import Path

import ray
from omegaconf import OmegaConf

from embodied_rl.config import ConfigError
from embodied_rl.config.loader import from_yaml_file, load_train_config
from embodied_rl.utils.checkpoint import CONFIG_FILE, load_checkpoint

DEFAULT_VIDEO_EPISODES = 4
"""Episodes filmed by ``eval --video`` (a 2 x 2 grid)."""


def evaluate_checkpoint(checkpoint_path: str | Path, episodes: int | None = None, ray_address: str | None = None,
                        video_episodes: int = 0, video_dir: str | Path | None = None,
                        overrides: list[str] | None = None) -> dict:
    """Episodes of a checkpoint's policy on its task: ``{"checkpoint": ..., "eval/...": ...}``, one from each state
    of the checkpoint's evaluation set (``eval.seed``; ``episodes`` of them, default ``eval.num_episodes``), the set
    its run evaluated on. Deterministic actions unless ``overrides`` (``key=value`` over the checkpoint's own
    config; the training algorithm's rules do not apply) say ``eval.greedy=false`` (e.g. with
    ``policy.options.temperature=0.5``); any time limit with ``eval.max_episode_steps`` (or
    ``env.max_episode_steps``).

    With ``video_episodes`` > 0, that many more are filmed into ``eval_<checkpoint name>.mp4`` beside the
    checkpoint (or in ``video_dir``), whose path is ``"video"`` in the result.

    The task must be registered in this process: a built-in one always is; one you registered yourself is when
    this is called from the script (or after importing the module) that registers it.
    """
    import sim_envs
    from embodied_rl.runners.evaluation import evaluate_policy
    from embodied_rl.runners.eval_video import record_video
    from embodied_rl.runners.setup import start_workers
    from embodied_rl.runtime import Cluster

    if episodes is not None and episodes < 1:
        raise ConfigError(f"--episodes={episodes} is out of range; allowed: an integer >= 1")
    if video_episodes < 0:
        raise ConfigError(f"--video-episodes={video_episodes} is out of range; allowed: an integer >= 0 (0: none)")
    try:
        checkpoint = load_checkpoint(Path(checkpoint_path))
    except FileNotFoundError as error:
        raise ConfigError(f"--checkpoint: {error}") from None
    config = from_yaml_file(checkpoint.path / CONFIG_FILE)
    try:
        sim_envs.get_task(config.task)
        if overrides:
            config = load_train_config(config.task, str(checkpoint.path / CONFIG_FILE), overrides, purpose="eval",
                                       saved=True)
    except sim_envs.TaskConfigError as error:
        raise ConfigError(f"--checkpoint {checkpoint.path} was trained on task {config.task!r}, which is not "
                          f"registered here (a task you registered yourself: evaluate from the Python script "
                          f"that registers it, with embodied_rl.commands.evaluate.evaluate_checkpoint); "
                          f"{error}") from None
    if ray_address:
        config.cluster.address = ray_address
    with Cluster(config.cluster.address, config.cluster.num_cpus) as cluster:
        workers = start_workers(config, cluster, with_actor=False)
        try:
            version = int(checkpoint.counters.get("iteration", 0))
            workers.install_weights(ray.put((checkpoint.weights, version)))
            config.eval.num_episodes = episodes or config.eval.num_episodes
            results = evaluate_policy(workers, config.eval)
            if video_episodes:
                directory = Path(video_dir) if video_dir else checkpoint.path.parent
                video = record_video(workers, video_episodes, directory / f"eval_{checkpoint.path.name}.mp4")
                results["video"] = video["path"]
        finally:
            workers.shutdown()
    return {"checkpoint": str(checkpoint.path), **results}


def run_eval(checkpoint_path: str, episodes: int | None, ray_address: str | None, as_json: bool, video: bool = False,
             video_episodes: int | None = None, video_dir: str | None = None,
             overrides: list[str] | None = None) -> int:
    if video or video_episodes is not None or video_dir:
        video_episodes = DEFAULT_VIDEO_EPISODES if video_episodes is None else video_episodes
        if video_episodes < 1:
            raise ConfigError(f"--video-episodes={video_episodes} is out of range; allowed: an integer >= 1")
    results = evaluate_checkpoint(checkpoint_path, episodes, ray_address, video_episodes or 0, video_dir, overrides)
    if as_json:
        print(json.dumps(results))
    else:
        print(OmegaConf.to_yaml(OmegaConf.create(results)).strip())
    return 0
