"""How a run stops, through the real CLI: Ctrl-C during an iteration writes a stop checkpoint beside the clean ones
(never over them), and `--resume` continues from the clean one bit for bit; `--retries` after the actor process is
SIGKILLed resumes the same way, in the same command. Both compared with a straight run of the same length."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
from tests_helpers import TrackedProcess

from embodied_rl.utils.checkpoint import load_checkpoint

# deterministic=true: a resume from a clean checkpoint of the synchronous loop is bit-exact. Episodes of 25 steps
# in iterations of 16 (a checkpoint falls mid-episode; 32 samples: the recipe's 32 minibatches validate); 6 iterations.
TINY = ["stages=[]",  # the task's base config (PPO), not its staged recipe
        "deterministic=true", "env.num_workers=1", "env.envs_per_worker=2", "env.max_episode_steps=25",
        "rollout.steps_per_iteration=16", "total_env_steps=192", "eval.every_iterations=2", "eval.num_episodes=2",
        "checkpoint.every_iterations=1", "checkpoint.keep_last=10", "policy.hidden_sizes=[16]",
        "algorithm.num_minibatches=2", "algorithm.update_epochs=2"]
FINAL = "iter_000006"

pytestmark = pytest.mark.slow


def _train(run_dir, *extra) -> TrackedProcess:
    return TrackedProcess(["train", "--task", "maniskill_pushcube", "--run-dir", str(run_dir), *extra, *TINY])


def _finish(process: TrackedProcess, expected: int = 0) -> str:
    returncode, _, stderr = process.wait(timeout=600)
    assert returncode == expected, stderr[-3000:]
    assert "Traceback" not in stderr
    assert not process.leftovers(), "processes left running after the command exited"
    return stderr


def _wait_for(path, process: TrackedProcess, timeout: float = 400) -> None:
    deadline = time.time() + timeout
    while not path.is_dir():
        assert process.poll() is None, process.popen.communicate()[1][-3000:]
        assert time.time() < deadline, f"{path} not written within {timeout} s"
        time.sleep(0.02)


def _files(directory) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _learning_rows(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k.split("/")[0] in ("train", "eval")} for row in rows]


def _assert_same_training(run_dir, straight) -> None:
    assert _learning_rows(run_dir) == _learning_rows(straight)
    want = load_checkpoint(straight / "checkpoints" / FINAL).weights
    got = load_checkpoint(run_dir / "checkpoints" / FINAL).weights
    assert want.keys() == got.keys()
    for name in want:
        assert np.array_equal(want[name], got[name]), name


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    _finish(_train(run_dir))
    rows = _learning_rows(run_dir)
    assert [r["train/iteration"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[2]["train/policy_loss"] != rows[3]["train/policy_loss"]  # figures that move
    return run_dir


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_ctrl_c_mid_iteration_keeps_the_clean_checkpoint_and_resume_is_exact(straight, tmp_path):
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"
    process = _train(run_dir)
    _wait_for(checkpoints / "iter_000002", process)
    before = _files(checkpoints / "iter_000002")  # published by one rename: complete when it appears
    process.popen.send_signal(signal.SIGINT)  # iteration 3 is under way
    stderr = _finish(process, expected=130)
    assert "checkpoint written" in stderr

    stops = [p for p in checkpoints.iterdir() if p.name.startswith("interrupted_iter_")]
    assert len(stops) == 1, sorted(p.name for p in checkpoints.iterdir())
    stop = load_checkpoint(stops[0])
    assert stop.counters["interrupted"] and stop.counters["stop_reason"] == "interrupt"
    assert stop.counters["iteration"] >= 2 and stop.env_state is None
    # Every clean checkpoint is untouched: iteration 2's has its bytes, env states and clean counters.
    assert _files(checkpoints / "iter_000002") == before
    clean = load_checkpoint(checkpoints / "iter_000002")
    assert clean.env_state is not None and "interrupted" not in clean.counters
    same = checkpoints / f"iter_{stop.counters['iteration']:06d}"
    assert (same / "env_state.json").is_file()  # the stop checkpoint's iteration keeps its clean one

    # a save killed mid-way by an earlier crash left a staging directory: the resume sweeps it
    leftover = checkpoints / f".staging-{_dead_pid()}-crashed"
    leftover.mkdir()
    (leftover / "model.safetensors").write_bytes(b"half")
    resumed = _finish(TrackedProcess(["train", "--run-dir", str(run_dir), "--resume"]))
    assert f"resuming from {same.name} at iteration {stop.counters['iteration']}" in resumed
    assert f"not the stop checkpoint {stops[0].name}" in resumed
    assert not leftover.exists() and "leftovers of an interrupted save" in resumed
    _assert_same_training(run_dir, straight)
    assert not stops[0].exists()  # superseded by the later clean checkpoints


def _kill_when(path, process: TrackedProcess, class_name: str) -> int:
    """SIGKILL the CLI's Ray worker process ``ray::<class_name>`` once ``path`` exists."""
    _wait_for(path, process)
    for child in psutil.Process(process.popen.pid).children(recursive=True):
        try:
            if (child.cmdline() or [""])[0].startswith(f"ray::{class_name}"):
                os.kill(child.pid, signal.SIGKILL)
                return child.pid
        except psutil.Error:
            continue
    raise AssertionError(f"no ray::{class_name} process found")


def test_retries_resume_after_the_actor_process_dies_and_finish_exactly(straight, tmp_path):
    run_dir = tmp_path / "run"
    process = _train(run_dir, "--retries", "1")
    _kill_when(run_dir / "checkpoints" / "iter_000002", process, "ActorWorker")
    killed_at = time.time()
    stderr = _finish(process)
    # The driver probes the actor while the env workers sample: its death is noticed at once, not when an env
    # worker's trajectory put gives up (fault.hang_timeout_s, 300 s); the retry then needs ~30 s.
    assert time.time() - killed_at < 240
    failure = [line for line in stderr.splitlines() if line.startswith("failure: ")]
    assert len(failure) == 1 and "no checkpoint written" in failure[0]  # the actor is gone: nothing to save
    retry = [line for line in stderr.splitlines() if line.startswith("retry ")]
    assert len(retry) == 1 and retry[0].startswith("retry 1/1: attempt 1 failed (ActorDiedError")
    assert "resuming from iter_" in stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["attempts"] == 2 and summary["iterations"] == 6 and summary["env_steps"] == 192
    assert "ActorDiedError" in (run_dir / "failures.log").read_text()
    _assert_same_training(run_dir, straight)
