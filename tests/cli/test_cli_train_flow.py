"""The user's path through the real CLI: train, resume, evaluate, interrupt; nothing left running."""

import json
import os
import signal
import time

import pytest

from tests_helpers import TrackedProcess

TINY = ["stages=[]",  # the task's base config (PPO), not its staged recipe
        "env.num_workers=1", "env.envs_per_worker=2", "rollout.steps_per_iteration=20",
        "algorithm.num_minibatches=2", "eval.num_episodes=2", "eval.every_iterations=0",
        "checkpoint.every_iterations=1", "checkpoint.keep_last=2", "policy.hidden_sizes=[32,32]"]


def _run(*args):
    process = TrackedProcess(list(args))
    returncode, stdout, stderr = process.wait()
    assert returncode == 0, stderr[-3000:]
    assert not process.leftovers(), "processes left running after the command exited"
    return stdout


def _frames(path) -> list:
    import imageio.v2 as imageio

    reader = imageio.get_reader(path)
    frames = [frame for frame in reader]
    reader.close()
    return frames


@pytest.mark.slow
def test_train_then_resume_then_eval(tmp_path):
    """Also the videos: training films its final evaluation (one episode), ``eval --video`` films a checkpoint."""
    run_dir = tmp_path / "run"
    first = _run("train", "--task", "maniskill_pushcube", "--run-dir", str(run_dir), "total_env_steps=80",
                 "eval.video_episodes=1", "env.max_episode_steps=20", *TINY)
    summary = json.loads(first.strip().splitlines()[-1])
    assert summary["env_steps"] == 80 and summary["iterations"] == 2
    assert 0.0 <= summary["eval/success_once"] <= 1.0
    assert (run_dir / "config.yaml").is_file() and (run_dir / "checkpoints" / "iter_000002").is_dir()
    trained = _frames(run_dir / "videos" / "eval_iter_000002.mp4")
    assert len(trained) == 21 and trained[0].shape == (128, 128, 3)  # 20 steps + the initial state

    resumed = _run("train", "--run-dir", str(run_dir), "--resume", "total_env_steps=160", "eval.video_episodes=0")
    summary = json.loads(resumed.strip().splitlines()[-1])
    assert summary["env_steps"] == 160 and summary["iterations"] == 4  # counters continue from the checkpoint
    counters = json.loads((run_dir / "checkpoints" / "iter_000004" / "counters.json").read_text())
    assert counters["env_steps"] == 160
    assert not (run_dir / "checkpoints" / "iter_000002").exists()  # keep_last=2
    assert "total_env_steps: 160" in (run_dir / "config.yaml").read_text()  # the resume's override is recorded

    # sampled actions on request (greedy is the default), over the checkpoint's own config; filmed, 2 episodes tiled;
    # on an out-of-distribution split, with another beside it
    evaluated = _run("eval", "--checkpoint", str(run_dir), "--episodes", "3", "--json", "eval.greedy=false",
                     "--video", "--video-episodes", "2", "eval.split=execution", "eval.ood_splits=[semantic]")
    result = json.loads(evaluated.strip().splitlines()[-1])
    assert result["eval/episodes"] == 3 and result["checkpoint"].endswith("iter_000004")
    video = run_dir / "checkpoints" / "eval_iter_000004.mp4"
    assert result["video"] == str(video)
    frames = _frames(video)
    assert len(frames) == 21 and frames[0].shape == (128, 256, 3)  # two 128 px tiles side by side
    assert {"eval/success_once", "eval/success_at_end", "eval/episode_return"} <= set(result)
    assert result["eval/greedy"] is False
    assert result["eval/split"] == "execution" and result["eval_semantic/episodes"] == 3
    # a bad override is refused in one line
    refused = TrackedProcess(["eval", "--checkpoint", str(run_dir), "eval.greedy=maybe"])
    returncode, _, stderr = refused.wait()
    assert returncode == 2 and "eval.greedy" in stderr and "Traceback" not in stderr


@pytest.mark.slow
# Each stop as it comes: SIGTERM to the whole process group (`timeout`, `kill -TERM -PGID`: it reaches Ray's daemons
# and workers too, unless the driver keeps them in a session of their own), Ctrl-C (SIGINT to the group), SIGTERM to
# the command alone, and the command SIGKILLed (its driver stops as if SIGTERMed). Only the first in the default run
# (CI time; pytest -m heavy runs the rest).
@pytest.mark.parametrize("signum, whole_group", [
    (signal.SIGTERM, True), pytest.param(signal.SIGINT, True, marks=pytest.mark.heavy),
    pytest.param(signal.SIGTERM, False, marks=pytest.mark.heavy),
    pytest.param(signal.SIGKILL, False, marks=pytest.mark.heavy)])
def test_interrupting_training_writes_a_checkpoint_and_stops_every_process(tmp_path, signum, whole_group):
    from embodied_rl.utils.checkpoint import load_checkpoint, read_trainer_state

    run_dir = tmp_path / "run"
    # No scheduled checkpoint before the interrupt: the one found afterwards is the interrupt's own.
    process = TrackedProcess(["train", "--task", "maniskill_pushcube", "--run-dir", str(run_dir),
                              "total_env_steps=100000000", *TINY, "checkpoint.every_iterations=100000"],
                             new_session=True)  # a process group of its own, as a shell job has
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + 240
    while not (metrics.is_file() and metrics.read_text().count("\n") >= 2) and time.time() < deadline:
        assert process.poll() is None, process.popen.stderr.read()[-3000:]
        time.sleep(0.5)
    assert metrics.is_file(), "no iteration logged within 240 s"
    assert len(process.descendants) >= 4  # Ray's daemons and the workers were seen
    assert not list((run_dir / "checkpoints").glob("iter_*"))
    if whole_group:
        os.killpg(process.popen.pid, signum)
    else:
        process.popen.send_signal(signum)
    returncode, _, stderr = process.wait(timeout=120)  # the output read to its end: the driver's too
    assert returncode == (-signal.SIGKILL if signum == signal.SIGKILL else 130), stderr[-3000:]
    assert "Traceback" not in stderr and "checkpoint written" in stderr
    assert not process.leftovers(), "processes left running after an interrupt"
    checkpoint = load_checkpoint(run_dir)
    assert checkpoint.counters["interrupted"] and checkpoint.counters["iteration"] >= 2
    assert read_trainer_state(checkpoint.trainer_state)["policy_version"] >= 2
    # Every checkpoint on disk is complete (written to a staging directory, then renamed).
    for directory in (run_dir / "checkpoints").iterdir():
        assert {p.name for p in directory.iterdir()} >= {"model.safetensors", "trainer_state.pt", "counters.json"}
