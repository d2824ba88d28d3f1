"""Workers killed in the middle of a sampling round (SIGKILL from outside): the round completes on the survivors
and the replacements, nothing waits forever, and the losses are counted."""

import os
import signal
import threading
import time

import psutil
import pytest
import ray
from tests_helpers import ray_worker_pids

from embodied_rl.config import load_train_config
from embodied_rl.runners.setup import start_workers


def busy_pids(class_name: str, method: str) -> list[int]:
    """Workers of ``class_name`` whose process title says they are inside ``method``."""
    return [pid for pid in ray_worker_pids(class_name) if method in " ".join(psutil.Process(pid).cmdline())]


def kill_one_while_sampling(class_name: str, rank_pids: list[int], killed: list, timeout_s: float = 120) -> None:
    """Once an env worker is inside ``interact``, SIGKILL the first of ``rank_pids`` (a ``class_name`` worker)."""
    start = time.monotonic()
    while not busy_pids("EnvWorker", "interact") and time.monotonic() - start < timeout_s:
        time.sleep(0.01)
    time.sleep(0.5)  # well inside the round
    os.kill(rank_pids[0], signal.SIGKILL)
    killed.append((class_name, rank_pids[0]))


def _kill_during_sample(workers, class_name: str, pid: int, steps: int) -> list:
    killed: list = []
    killer = threading.Thread(target=kill_one_while_sampling, args=(class_name, [pid], killed), daemon=True)
    killer.start()
    episodes = workers.sample(steps)
    killer.join(timeout=5)
    assert killed == [(class_name, pid)]
    return episodes


def test_a_rollout_worker_killed_while_serving_is_replaced_and_the_round_completes(cluster):
    config = load_train_config("maniskill_pushcube", None, [
        "env.num_workers=2", "env.envs_per_worker=2", "env.max_episode_steps=50", "rollout.num_workers=2",
        "rollout.steps_per_iteration=200", "algorithm.num_minibatches=2", "policy.hidden_sizes=[16]"])
    workers = start_workers(config, cluster)
    try:
        pid = ray.get(workers.rollout.workers[0].process_id.remote())
        episodes = _kill_during_sample(workers, "RolloutWorker", pid, 200)
        assert len(episodes) == 2 * 2 * 4  # 4 episodes of 50 steps per env: no env worker lost a step
        assert workers.faults["fault/rollout_workers_replaced"] == 1 and workers.trajectories_sent == 2
        assert ray.get(workers.rollout.workers[0].process_id.remote()) != pid
        metrics = ray.get(workers.actor.call("update", workers.trajectories_sent)[0])
        assert metrics["train/needs_more"] == 0
        assert len(workers.sample(50)) == 2 * 2  # the replacement serves the next round
        ray.get(workers.actor.call("update", workers.trajectories_sent)[0])
    finally:
        workers.shutdown()


def test_an_env_worker_killed_in_a_grouped_round_drops_the_round_and_its_replacement_rejoins_its_group(cluster):
    # GRPO groups of 2 spanning the two env workers (1 env each): a round missing one member cannot be scored.
    config = load_train_config("maniskill_pushcube", None, [
        "env.num_workers=2", "env.envs_per_worker=1", "env.max_episode_steps=50", "rollout.steps_per_iteration=200",
        "algorithm.name=grpo", "algorithm.group_size=2", "algorithm.num_minibatches=2", "policy.hidden_sizes=[16]"])
    workers = start_workers(config, cluster)
    try:
        pid = ray.get(workers.env.workers[1].process_id.remote())
        _kill_during_sample(workers, "EnvWorker", pid, 200)
        assert workers.round_dropped and workers.trajectories_sent == 1
        assert workers.faults["fault/env_workers_replaced"] == 1 and workers.faults["fault/trajectories_lost"] == 1
        assert workers.faults["fault/rounds_dropped"] == 1
        metrics = ray.get(workers.actor.call("update", workers.trajectories_sent, 0.0, True)[0])
        assert metrics["train/needs_more"] == 1 and metrics["train/discarded_trajectories"] == 1
        ids = ray.get(workers.env.call("group_state_ids", 0))
        assert ids[0] == ids[1]  # the replacement starts its next episode from its partner's state
        workers.sample(50)
        assert not workers.round_dropped
        assert workers.trajectories_sent == 2
        metrics = ray.get(workers.actor.call("update", workers.trajectories_sent)[0])
        assert "train/discarded_trajectories" not in metrics  # a whole group, taken by the algorithm
    finally:
        workers.shutdown()


def test_an_env_worker_waiting_for_an_answer_that_never_comes_fails_naming_the_key(cluster):
    config = load_train_config("maniskill_pushcube", None, [
        "env.num_workers=1", "env.envs_per_worker=1", "rollout.steps_per_iteration=10", "algorithm.num_minibatches=1",
        "policy.hidden_sizes=[16]"])
    workers = start_workers(config, cluster, with_actor=False)
    try:
        worker = workers.env.replace(0, answer_timeout_s=1.0)  # nobody serves: no rollout worker is serving
        with pytest.raises(ray.exceptions.RayTaskError, match="no item for key 'responses:0:0:0'"):
            ray.get(worker.interact.remote(10), timeout=60)
    finally:
        workers.shutdown()


def test_a_rollout_worker_dead_at_a_weight_broadcast_is_replaced_and_every_worker_gets_the_weights(cluster):
    """Killed between sampling and the broadcast that follows the update: the broadcast's collective is broken for
    every member; the dead worker is replaced and the weights reach all rollout workers over a new group."""
    config = load_train_config("maniskill_pushcube", None, [
        "env.num_workers=1", "env.envs_per_worker=2", "rollout.num_workers=2", "rollout.steps_per_iteration=10",
        "algorithm.num_minibatches=2", "policy.hidden_sizes=[16]"])
    workers = start_workers(config, cluster)
    try:
        workers.form_weight_broadcast()
        assert workers.broadcast_weights() == 0
        workers.sample(10)
        ray.get(workers.actor.call("update", workers.trajectories_sent)[0])  # policy version 1
        pid = ray.get(workers.rollout.workers[1].process_id.remote())
        os.kill(pid, signal.SIGKILL)
        assert workers.broadcast_weights() == 1
        assert workers.faults["fault/rollout_workers_replaced"] == 1
        assert ray.get(workers.rollout.workers[1].process_id.remote()) != pid
        actor_weights, _ = ray.get(workers.actor.workers[0].get_weights.remote())
        for rollout in workers.rollout.workers:
            weights, version = ray.get(rollout.get_weights.remote())
            assert version == 1 and all((weights[k] == actor_weights[k]).all() for k in actor_weights)
        workers.sample(10)  # the new group serves the next round
        assert workers.trajectories_sent == 1 and workers.faults["fault/rollout_workers_replaced"] == 1
    finally:
        workers.shutdown()
