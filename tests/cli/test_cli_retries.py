"""Failures on the driver's side and `train --retries N` through the real CLI: bad values are one line (exit 2); an
env worker that keeps dying (a real WorkerLostError: SIGKILL from outside, as an operator or the OOM killer would)
ends the run with a stop checkpoint beside the clean ones, one line saying so, and exit 1; a text run whose
trainer is SIGKILLed retries and finishes. (`--retries` resuming after the embodied actor process dies:
tests/runners/test_runners_stop_checkpoint.py.)"""

import json
import os
import signal
import time

import psutil
import pytest
from conftest import run_cli
from tests_helpers import TrackedProcess

from embodied_rl.utils.checkpoint import load_checkpoint

TINY = ["stages=[]",  # the task's base config (PPO), not its staged recipe
        "env.num_workers=1", "env.envs_per_worker=2", "env.max_episode_steps=25", "rollout.steps_per_iteration=16",
        "total_env_steps=100000", "eval.every_iterations=0", "eval.num_episodes=2", "checkpoint.every_iterations=1",
        "checkpoint.keep_last=10", "policy.hidden_sizes=[16]", "algorithm.num_minibatches=2"]


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_a_bad_retries_value_is_one_line_and_exit_2(tmp_path, value):
    result = run_cli("train", "--task", "maniskill_pushcube", "--run-dir", str(tmp_path / "run"), "--retries", value)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: argument --retries: {value!r} is not allowed; allowed: an integer >= 0 "
        "(see `embodied-rl train --help`)"]
    assert not (tmp_path / "run").exists()


def _pids_of(process: TrackedProcess, name: str) -> list[int]:
    """The run's worker processes whose Ray title starts with ``ray::<name>``."""
    pids = []
    for child in psutil.Process(process.popen.pid).children(recursive=True):
        try:
            if (child.cmdline() or [""])[0].startswith(f"ray::{name}"):
                pids.append(child.pid)
        except psutil.Error:
            continue
    return pids


TEXT = ["env.count=60", "env.heldout_count=4", "sft.steps=3", "sft.batch_size=4", "rl.iterations=6",
        "rl.prompts_per_iteration=2", "algorithm.group_size=4", "rl.lr=1e-3", "eval.every_iterations=0",
        "eval.num_problems=2", "rollout.max_new_tokens=3", "checkpoint.every_iterations=1", "torch_threads=1"]


# Left out of the default run (CI time; pytest -m heavy runs it):
# --retries after a dead actor is in test_runners_stop_checkpoint.py
@pytest.mark.heavy
@pytest.mark.slow
def test_a_text_run_retries_after_its_trainer_is_sigkilled(tmp_path):
    """SIGKILL of the trainer rank mid-run: the attempt fails (no stop checkpoint: the trainer is gone), one retry
    line, and the run resumes from its newest checkpoint with every worker made anew, to the end (exit 0)."""
    run_dir = tmp_path / "run"
    process = TrackedProcess(["train", "--task", "math_arith", "--run-dir", str(run_dir), "--retries", "1", *TEXT])
    deadline = time.time() + 400
    while not (run_dir / "checkpoints" / "iter_000002").is_dir():
        assert process.poll() is None and time.time() < deadline, process.popen.communicate()[1][-3000:]
        time.sleep(0.1)
    trainers = _pids_of(process, "LMActorWorker")
    assert len(trainers) == 1
    os.kill(trainers[0], signal.SIGKILL)
    returncode, stdout, stderr = process.wait(timeout=400)
    assert returncode == 0, stderr[-3000:]
    assert [line for line in stderr.splitlines() if line.startswith("retry ")][0].startswith("retry 1/1: attempt 1")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["attempts"] == 2 and summary["iterations"] == 6
    assert (run_dir / "failures.log").read_text().count("--- attempt 1 failed") == 1
    assert (run_dir / "model" / "config.json").is_file() and not process.leftovers()


def _env_worker_pids(process: TrackedProcess) -> list[int]:
    return _pids_of(process, "EnvWorker")


@pytest.mark.slow
def test_a_worker_that_keeps_dying_leaves_a_stop_checkpoint_and_exit_1(tmp_path):
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"
    process = TrackedProcess(["train", "--task", "maniskill_pushcube", "--run-dir", str(run_dir), *TINY])
    deadline = time.time() + 400
    while not (checkpoints / "iter_000002").is_dir():
        assert process.poll() is None and time.time() < deadline, process.popen.communicate()[1][-3000:]
        time.sleep(0.1)
    before = {p.name: p.read_bytes() for p in (checkpoints / "iter_000002").iterdir()}
    killed = set()
    # SIGKILL the env worker, then each replacement, until the run gives up on it (MAX_WORKER_RESTARTS)
    while process.poll() is None and not list(checkpoints.glob("interrupted_iter_*")) and len(killed) < 12:
        for pid in set(_env_worker_pids(process)) - killed:
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.5)
    returncode, _, stderr = process.wait(timeout=300)
    assert returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr and not process.leftovers()
    failure = [line for line in stderr.splitlines() if line.startswith("failure: ")]
    assert len(failure) == 1 and "stop checkpoint written" in failure[0]
    # the run gives up on the env worker: it died once too often, or a replacement was killed while starting
    kind = failure[0].split(":")[1].strip()
    assert kind in ("WorkerLostError", "WorkerStartError") and "env" in failure[0], failure[0]
    assert stderr.strip().splitlines()[-1].startswith(f"error: {kind}: ")

    stops = sorted(checkpoints.glob("interrupted_iter_*"))
    assert len(stops) == 1 and failure[0].endswith(str(stops[0]))
    stop = load_checkpoint(stops[0])
    assert stop.counters["interrupted"] and stop.counters["stop_reason"] == failure[0].split("; stop checkpoint")[0]
    # the clean checkpoints are untouched, and the newest of them wins a tie with the stop checkpoint
    assert {p.name: p.read_bytes() for p in (checkpoints / "iter_000002").iterdir()} == before
    newest_clean = checkpoints / f"iter_{stop.counters['iteration']:06d}"
    # its env states, unless a kill landed between its round and its snapshot (then it says so, and a resume
    # from it starts fresh episodes)
    assert (newest_clean / "env_state.json").is_file() or f"checkpoint of iteration {stop.counters['iteration']} " \
        "without env states" in stderr
    assert load_checkpoint(run_dir).path == newest_clean
    assert json.loads((newest_clean / "counters.json").read_text()).get("interrupted") is None


STAGED = {"stages": [
    {"name": "sft", "algorithm": {"name": "sft", "demo_episodes": 2, "gradient_steps": 200,
                                  "steps_per_iteration": 100, "batch_size": 64}},
    {"name": "grpo", "algorithm": {"name": "grpo", "group_size": 2, "score": "return", "num_minibatches": 2,
                                   "update_epochs": 1},
     "env": {"max_episode_steps": 10}, "rollout": {"steps_per_iteration": 10}, "total_env_steps": 80},
]}


# Left out of the default run (CI time; pytest -m heavy runs it):
# staged resume and --retries are each tested in
# the default run.
@pytest.mark.heavy
@pytest.mark.slow
def test_retries_of_a_staged_recipe_continue_its_unfinished_stage(tmp_path):
    """The actor process is SIGKILLed in the second stage: the retry skips the finished stage and resumes the
    second from its checkpoint."""
    import yaml

    recipe = tmp_path / "staged.yaml"
    recipe.write_text(yaml.safe_dump(STAGED))
    run_dir = tmp_path / "run"
    process = TrackedProcess(["train", "--task", "maniskill_pushcube", "--config", str(recipe), "--run-dir",
                              str(run_dir), "--retries", "1", "env.num_workers=1", "env.envs_per_worker=2",
                              "eval.num_episodes=2", "eval.every_iterations=0", "checkpoint.every_iterations=1",
                              "policy.hidden_sizes=[16]"], env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    deadline = time.time() + 500
    while not (run_dir / "1-grpo" / "checkpoints" / "iter_000001").is_dir():
        assert process.poll() is None and time.time() < deadline, process.popen.communicate()[1][-3000:]
        time.sleep(0.05)
    actors = [child for child in psutil.Process(process.popen.pid).children(recursive=True)
              if (child.cmdline() or [""])[0].startswith("ray::ActorWorker")]
    assert actors, "no actor process found"
    os.kill(actors[0].pid, signal.SIGKILL)
    returncode, stdout, stderr = process.wait(timeout=600)
    assert returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr and not process.leftovers()
    assert [line for line in stderr.splitlines() if line.startswith("retry ")][0].startswith(
        "retry 1/1: attempt 1 failed (ActorDiedError")
    assert "stage 0-sft: finished earlier" in stdout
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["attempts"] == 2 and summary["stages"]["1-grpo"]["env_steps"] == 80


# -m heavy only (CI time): the stop checkpoint's boundary logic and its exact resume are tested in process
# (tests/runners/test_runners_reasoning_stop.py), the signal's way to the driver by the embodied runs' CLI tests.
@pytest.mark.slow
@pytest.mark.heavy
def test_ctrl_c_of_a_text_run_leaves_a_stop_checkpoint_that_resumes_bit_for_bit(tmp_path):
    """Ctrl-C (SIGINT to the command's process group, as a terminal sends it) mid-run: exit 130, one stop
    checkpoint, no process left; ``--resume`` from it ends with the uninterrupted run's final weights."""
    import torch
    from safetensors.torch import load_file

    overrides = [o for o in TEXT if not o.startswith(("checkpoint.", "rl.iterations"))] + [
        "checkpoint.every_iterations=0", "rl.iterations=8", "algorithm.kl_coef=0.1"]
    whole = TrackedProcess(["train", "--task", "math_arith", "--run-dir", str(tmp_path / "whole"), *overrides])
    returncode, _, stderr = whole.wait(timeout=400)
    assert returncode == 0, stderr[-3000:]

    run_dir = tmp_path / "stopped"
    process = TrackedProcess(["train", "--task", "math_arith", "--run-dir", str(run_dir), *overrides],
                             new_session=True)
    metrics, deadline = run_dir / "metrics.jsonl", time.time() + 400
    while not (metrics.is_file() and metrics.read_text().count("\n") >= 4):  # start, SFT and two iterations
        assert process.poll() is None and time.time() < deadline, process.popen.communicate()[1][-3000:]
        time.sleep(0.1)
    os.killpg(process.popen.pid, signal.SIGINT)
    returncode, _, stderr = process.wait(timeout=300)
    assert returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "interrupt; stop checkpoint written" in stderr
    assert not process.leftovers()
    checkpoint = load_checkpoint(run_dir)
    assert checkpoint.counters["interrupted"] and 2 <= checkpoint.counters["iteration"] < 8
    resumed = run_cli("train", "--run-dir", str(run_dir), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected, got = (load_file(str(d / "model" / "model.safetensors")) for d in (tmp_path / "whole", run_dir))
    assert all(torch.equal(got[name], expected[name]) for name in expected)
