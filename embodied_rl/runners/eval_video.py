"""Evaluation videos: a few deterministic episodes filmed on env worker 0, as a grid mp4.

In training (``eval.video_episodes`` > 0) they go to ``<run dir>/videos/eval_iter_<N>.mp4`` at the final
evaluation (and every ``eval.video_every_evaluations``-th one); ``embodied-rl eval --video`` writes one for a
checkpoint. The policy acts through the rollout workers, as in evaluation; the env worker renders on a separate
env (see ``workers/video_episodes.py``) and the driver writes the file (``utils/video.py``), so the video lands in
the run directory wherever the env worker runs.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import ray

from embodied_rl.utils.video import write_episode_video

VIDEO_SIZE = 128
"""Tile width = height in pixels (4 episodes: a 256 x 256 video)."""
VIDEO_FPS = 20
"""Frames per second: one frame per simulator step, real time for ManiSkill's 20 Hz control."""
VIDEOS_DIR = "videos"


def record_video(workers, num_episodes: int, path: str | Path, size: int = VIDEO_SIZE) -> dict:
    """Film ``num_episodes`` episodes on env worker 0 of ``workers`` (an ``EmbodiedWorkers`` whose rollout workers
    hold the policy) and write the grid to ``path``: ``{"path", "episodes", "success_once", "seconds"}``."""
    start = time.perf_counter()
    serving = workers.start_serving()
    try:
        episodes = ray.get(workers.env.call("record_video", num_episodes, size, ranks=[0])[0])
    finally:
        workers.stop_serving(serving)
    written = write_episode_video(path, episodes["frames"], episodes["success"], fps=VIDEO_FPS)
    return {"path": str(written), "episodes": num_episodes,
            "success_once": float(np.asarray(episodes["success"]).any(axis=0).mean()),
            "seconds": time.perf_counter() - start}


def video_due(eval_config, iteration: int, finished: bool) -> bool:
    """Whether the evaluation at ``iteration`` films (``eval_config``: the run's ``EvalConfig``)."""
    if not eval_config.video_episodes:
        return False
    every = eval_config.video_every_evaluations * eval_config.every_iterations
    return finished or bool(every and iteration % every == 0)


def eval_video_path(directory: str | Path, iteration: int) -> Path:
    return Path(directory) / VIDEOS_DIR / f"eval_iter_{iteration:06d}.mp4"


def record_eval_video(workers, eval_config, run_dir: Path, iteration: int, finished: bool) -> tuple[dict, Path | None]:
    """During a training run's evaluation (in its sampling turn): film when due. Its metrics (``time/video_s``)
    and the video's path (None when not due)."""
    if not video_due(eval_config, iteration, finished):
        return {}, None
    video = record_video(workers, eval_config.video_episodes, eval_video_path(run_dir, iteration))
    return {"time/video_s": video["seconds"]}, Path(video["path"])
