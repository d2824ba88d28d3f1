"""Workers killed in the middle of a sampling round (SIGKILL from outside), or stopped (SIGSTOP: alive but
hung): the round completes on the survivors and the replacements, nothing waits forever, and the losses are
counted; a slow round that still progresses is left alone."""

import os
import signal
import sys
import threading
import time

import psutil
import pytest
import ray
from tests_helpers import kill_during_sample as _kill_during_sample, kill_one_while_sampling, ray_worker_pids

import sim_envs
from embodied_rl.config import load_train_config
from embodied_rl.runners.setup import start_workers

# The slow task's factory travels to the env workers by value (tests/ is not on their path).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SLOW_STEP_S = 0.05


class SlowEnv:
    """A real PushCube vector env whose every step takes ``SLOW_STEP_S`` longer (a heavy simulator)."""

    def __init__(self, env):
        self.env = env

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, actions, observe: bool = True):
        time.sleep(SLOW_STEP_S)
        return self.env.step(actions, observe=observe)


@sim_envs.register_task("test_faults_slow_pushcube", "PushCube whose steps take 50 ms more", "maniskill",
                        "PushCube-v1")
def slow_pushcube(num_envs: int, **overrides):
    from sim_envs.maniskill.tasks import pushcube

    return SlowEnv(pushcube(num_envs, **overrides))


def gone(pid: int, timeout_s: float = 30) -> bool:
    """Whether process ``pid`` has exited (a zombie counts) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


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


def stop_one_during_a_round(workers, worker_class: str, pid: int, steps: int) -> tuple[list, float]:
    """SIGSTOP process ``pid`` (a ``worker_class`` worker) once the round of ``steps`` steps is under way; returns
    the round's episodes and its seconds."""
    stopper = threading.Thread(target=kill_one_while_sampling, args=(worker_class, [pid], [], 120, signal.SIGSTOP),
                               daemon=True)
    stopper.start()
    start = time.monotonic()
    episodes = workers.sample(steps)
    took = time.monotonic() - start
    stopper.join(timeout=5)
    return episodes, took


def test_a_stopped_env_worker_is_found_hung_and_replaced_within_the_hang_deadline(cluster):
    """SIGSTOP: the process lives (Ray sees nothing wrong) but neither steps nor answers its heartbeat."""
    config = load_train_config("maniskill_pushcube", None, [
        "env.num_workers=2", "env.envs_per_worker=2", "env.max_episode_steps=50", "rollout.steps_per_iteration=300",
        "algorithm.num_minibatches=2", "policy.hidden_sizes=[16]", "fault.hang_timeout_s=10"])
    workers = start_workers(config, cluster)
    pid = ray.get(workers.env.workers[1].process_id.remote())
    try:
        _, took = stop_one_during_a_round(workers, "EnvWorker", pid, 300)
        assert took < 60, f"the round took {took:.0f} s"
        assert workers.faults["fault/env_workers_replaced"] == 1 and workers.faults["fault/hung_workers_killed"] == 1
        assert workers.faults["fault/trajectories_lost"] == 1 and workers.last_round.env_ranks == (0,)
        assert gone(pid)  # killed, not left stopped
        metrics = workers.finish_update(workers.start_update())
        assert metrics["train/env_steps_trained"] == 300 * 2  # the survivor's round, nothing of the stopped one
        workers.sample(50)  # the replacement takes part in the next round
        assert workers.last_round.env_ranks == (0, 1)
    finally:
        if not gone(pid, 0):
            os.kill(pid, signal.SIGKILL)
        workers.shutdown()


def test_a_slow_round_that_progresses_is_not_taken_for_a_hung_one(cluster):
    config = load_train_config("maniskill_pushcube", None, [
        "env.num_workers=1", "env.envs_per_worker=1", "env.max_episode_steps=20", "rollout.steps_per_iteration=100",
        "algorithm.num_minibatches=2", "policy.hidden_sizes=[16]", "fault.hang_timeout_s=2"])
    config.task = "test_faults_slow_pushcube"
    workers = start_workers(config, cluster)
    try:
        start = time.monotonic()
        episodes = workers.sample(100)
        assert time.monotonic() - start > 2 * config.fault.hang_timeout_s  # longer than the hang deadline
        assert len(episodes) == 5 and workers.last_round.env_ranks == (0,)
        assert workers.faults["fault/hung_workers_killed"] == 0 and workers.faults["fault/env_workers_replaced"] == 0
        assert workers.finish_update(workers.start_update())["train/env_steps_trained"] == 100
    finally:
        workers.shutdown()


def test_a_rollout_worker_dead_after_the_last_env_worker_returned_is_replaced_and_sampling_goes_on(cluster):
    """The window between the round's last env result and telling the rollout workers to stop: the rollout worker
    is SIGKILLed (and gone) right before ``stop_serving``, deterministically, by wrapping that method."""
    config = load_train_config("maniskill_pushcube", None, [
        "env.num_workers=1", "env.envs_per_worker=2", "rollout.num_workers=1", "rollout.steps_per_iteration=10",
        "algorithm.num_minibatches=2", "policy.hidden_sizes=[16]", "fault.hang_timeout_s=30"])
    workers = start_workers(config, cluster)
    pid = ray.get(workers.rollout.workers[0].process_id.remote())
    stop_serving = workers.stop_serving

    def kill_then_stop(serving, *args, **kwargs):
        os.kill(pid, signal.SIGKILL)
        assert gone(pid)
        return stop_serving(serving, *args, **kwargs)

    workers.stop_serving = kill_then_stop
    try:
        workers.sample(10)
        del workers.stop_serving
        assert workers.faults["fault/rollout_workers_replaced"] == 1 and workers.faults["fault/trajectories_lost"] == 0
        assert workers.last_round.env_ranks == (0,)  # the env worker's round counts in full
        assert ray.get(workers.rollout.workers[0].process_id.remote()) != pid
        metrics = workers.finish_update(workers.start_update())
        assert metrics["train/needs_more"] == 0 and metrics["train/env_steps_trained"] == 2 * 10
        workers.sample(10)  # the replacement serves the next round
        assert workers.finish_update(workers.start_update())["train/env_steps_trained"] == 2 * 2 * 10
    finally:
        workers.shutdown()


# Left out of the default run (CI time; pytest -m heavy runs it):
# a hung worker found and replaced: the env worker's test above
@pytest.mark.heavy
def test_a_stopped_rollout_worker_is_found_hung_and_replaced_and_the_env_workers_resend(cluster):
    """SIGSTOP of the only rollout worker: the env workers wait for answers (not their fault, they are left alone);
    the rollout worker answers no heartbeat, is killed and replaced, and the env workers resend their requests."""
    config = load_train_config("maniskill_pushcube", None, [
        "env.num_workers=2", "env.envs_per_worker=2", "env.max_episode_steps=50", "rollout.num_workers=1",
        "rollout.steps_per_iteration=300", "algorithm.num_minibatches=2", "policy.hidden_sizes=[16]",
        "fault.hang_timeout_s=10"])
    workers = start_workers(config, cluster)
    pid = ray.get(workers.rollout.workers[0].process_id.remote())
    try:
        episodes, took = stop_one_during_a_round(workers, "RolloutWorker", pid, 300)
        # Far under the 300 s put deadline; roomy beside other test processes (63 s once with two runs beside it).
        assert took < 120, f"the round took {took:.0f} s"
        assert workers.faults["fault/rollout_workers_replaced"] == 1 and workers.faults["fault/hung_workers_killed"] == 1
        assert workers.faults["fault/env_workers_replaced"] == 0 and workers.last_round.env_ranks == (0, 1)
        assert len(episodes) == 2 * 2 * 6  # every env's 6 episodes of 50 steps: no env worker lost a step
        assert gone(pid)
        assert workers.finish_update(workers.start_update())["train/env_steps_trained"] == 2 * 2 * 300
    finally:
        if not gone(pid, 0):
            os.kill(pid, signal.SIGKILL)
        workers.shutdown()
