"""A live training run survives SIGKILL of an env worker and of a rollout worker, sent from outside as an operator
would (``kill -9`` of the process Ray named after the worker class): both are replaced, the lost trajectories
are counted, and the run finishes every iteration."""

import json
import os
import random
import signal
import threading

import pytest
from tests_helpers import act_during_run, ray_worker_pids

from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner

ITERATIONS = 8
CONFIG = ["env.num_workers=2", "env.envs_per_worker=2", "env.max_episode_steps=10", "rollout.num_workers=2",
          "rollout.steps_per_iteration=10", f"total_env_steps={ITERATIONS * 40}", "eval.every_iterations=0",
          "eval.num_episodes=4", "checkpoint.every_iterations=0", "policy.hidden_sizes=[16]",
          "algorithm.num_minibatches=2", "algorithm.update_epochs=1"]


def kill_one(class_name: str, killed: list) -> None:
    """SIGKILL one running worker of ``class_name``, as ``kill -9`` would."""
    pids = ray_worker_pids(class_name)
    if pids:
        victim = random.choice(pids)
        os.kill(victim, signal.SIGKILL)
        killed.append((class_name, victim))


def test_a_run_survives_sigkill_of_an_env_worker_and_a_rollout_worker(cluster, tmp_path):
    config = load_train_config("maniskill_pushcube", None, CONFIG)
    killed: list = []
    killer = threading.Thread(target=act_during_run, daemon=True, args=(
        tmp_path, [(2, "EnvWorker"), (4, "RolloutWorker")], lambda name: kill_one(name, killed)))
    killer.start()
    EmbodiedRunner(config, tmp_path).run()
    killer.join(timeout=5)
    assert [name for name, _ in killed] == ["EnvWorker", "RolloutWorker"]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/iteration"] for r in rows] == list(range(1, ITERATIONS + 1))
    last = rows[-1]
    assert last["fault/env_workers_replaced"] == 1 and last["fault/rollout_workers_replaced"] == 1
    assert last["fault/trajectories_lost"] == 1  # the dead env worker's trajectory of one round
    assert last["eval/episodes"] == 4  # the replacements serve the final evaluation
    assert not set(pid for _, pid in killed) & set(ray_worker_pids("EnvWorker") + ray_worker_pids("RolloutWorker"))


def test_a_rank_that_keeps_dying_stops_the_run_with_one_line_naming_it():
    from embodied_rl.runners.setup import MAX_WORKER_RESTARTS, EmbodiedWorkers, WorkerLostError

    workers = EmbodiedWorkers(None, None, None, None, {}, None)
    for _ in range(MAX_WORKER_RESTARTS):
        workers._count_restart("env", 1, RuntimeError("simulator crashed. details follow"))
    workers._count_restart("env", 0, RuntimeError("another rank"))  # counted per rank
    with pytest.raises(WorkerLostError) as raised:
        workers._count_restart("env", 1, RuntimeError("simulator crashed. details follow"))
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"env worker 1 died {MAX_WORKER_RESTARTS + 1} times")
    assert message.endswith("RuntimeError: simulator crashed")
