"""Evaluation videos through the real CLI: a training run films its final evaluation, `eval --video` a checkpoint."""

import json
from types import SimpleNamespace

import pytest

from embodied_rl.runners.eval_video import video_due
from tests_helpers import TrackedProcess

TINY = ["env.num_workers=1", "env.envs_per_worker=2", "rollout.steps_per_iteration=20",
        "algorithm.num_minibatches=2", "eval.num_episodes=2", "eval.every_iterations=0", "policy.hidden_sizes=[32,32]"]


def _run(*args):
    process = TrackedProcess(list(args))
    returncode, stdout, stderr = process.wait()
    assert returncode == 0, stderr[-3000:]
    return stdout


def _read(path):
    import imageio.v2 as imageio

    reader = imageio.get_reader(path)
    frames = [frame for frame in reader]
    reader.close()
    return frames


def test_videos_are_due_at_the_final_evaluation_and_every_nth_one():
    config = SimpleNamespace(video_episodes=4, video_every_evaluations=3, every_iterations=10)
    assert video_due(config, 7, finished=True)
    assert [i for i in range(10, 100, 10) if video_due(config, i, finished=False)] == [30, 60, 90]
    config.video_every_evaluations = 0
    assert not video_due(config, 30, finished=False)
    config.video_episodes = 0
    assert not video_due(config, 7, finished=True)


@pytest.mark.slow
def test_training_films_its_final_evaluation_and_eval_films_a_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    _run("train", "--task", "maniskill_pushcube", "--run-dir", str(run_dir), "total_env_steps=80",
         "eval.video_episodes=1", "env.max_episode_steps=20", *TINY)
    trained = _read(run_dir / "videos" / "eval_iter_000002.mp4")
    assert len(trained) == 21 and trained[0].shape == (128, 128, 3)  # 20 steps + the initial state

    result = json.loads(_run("eval", "--checkpoint", str(run_dir), "--episodes", "1", "--video",
                             "--video-episodes", "2", "--json").strip().splitlines()[-1])
    video = run_dir / "checkpoints" / "eval_iter_000002.mp4"
    assert result["video"] == str(video)
    frames = _read(video)
    assert len(frames) == 21 and frames[0].shape == (128, 256, 3)  # two 128 px tiles side by side
