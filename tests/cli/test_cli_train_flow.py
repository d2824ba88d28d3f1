"""The user's path through the real CLI: train, resume, evaluate, interrupt; nothing left running."""

import json
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, run_cli
from tests_helpers import ray_daemons_now

TINY = ["env.num_workers=1", "env.envs_per_worker=2", "rollout.steps_per_iteration=20",
        "algorithm.num_minibatches=2", "eval.num_episodes=2", "eval.every_iterations=0",
        "checkpoint.every_iterations=1", "checkpoint.keep_last=2", "policy.hidden_sizes=[32,32]"]


def _wait_for_daemons_to_exit(before, seconds=30):
    deadline = time.time() + seconds
    while ray_daemons_now() - before and time.time() < deadline:
        time.sleep(0.5)
    return ray_daemons_now() - before


@pytest.mark.slow
def test_train_then_resume_then_eval(tmp_path):
    before = ray_daemons_now()
    run_dir = tmp_path / "run"
    first = run_cli("train", "--task", "maniskill_pushcube", "--run-dir", str(run_dir), "total_env_steps=80", *TINY)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert summary["env_steps"] == 80 and summary["iterations"] == 2
    assert 0.0 <= summary["eval/success_once"] <= 1.0
    assert (run_dir / "config.yaml").is_file() and (run_dir / "checkpoints" / "iter_000002").is_dir()

    resumed = run_cli("train", "--run-dir", str(run_dir), "--resume", "total_env_steps=160")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["env_steps"] == 160 and summary["iterations"] == 4  # counters continue from the checkpoint
    counters = json.loads((run_dir / "checkpoints" / "iter_000004" / "counters.json").read_text())
    assert counters["env_steps"] == 160
    assert not (run_dir / "checkpoints" / "iter_000002").exists()  # keep_last=2

    evaluated = run_cli("eval", "--checkpoint", str(run_dir), "--episodes", "3", "--json")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    result = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert result["eval/episodes"] == 3 and result["checkpoint"].endswith("iter_000004")
    assert {"eval/success_once", "eval/success_at_end", "eval/episode_return"} <= set(result)
    assert not _wait_for_daemons_to_exit(before), "Ray daemons left running after the commands exited"


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_training_stops_every_process_and_keeps_checkpoints_whole(tmp_path, signum):
    before = ray_daemons_now()
    run_dir = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "embodied_rl.cli", "train", "--task", "maniskill_pushcube",
                                "--run-dir", str(run_dir), "total_env_steps=100000000", *TINY],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not list((run_dir / "checkpoints").glob("iter_*")) and time.time() < deadline:
        assert process.poll() is None, process.stderr.read()[-3000:]
        time.sleep(0.5)
    assert list((run_dir / "checkpoints").glob("iter_*")), "no checkpoint within 240 s"
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr
    assert not _wait_for_daemons_to_exit(before), "Ray daemons left running after an interrupt"
    # Every checkpoint on disk is complete (written to a staging directory, then renamed).
    for checkpoint in (run_dir / "checkpoints").glob("iter_*"):
        assert {p.name for p in checkpoint.iterdir()} >= {"model.safetensors", "trainer_state.pt", "counters.json"}
