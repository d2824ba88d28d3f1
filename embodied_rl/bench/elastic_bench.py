"""``embodied-rl bench elastic``: a live training loop (sample, PPO update, weight sync) resized while it runs.

Three phases of ``--rounds`` iterations each, measured in one run on one local cluster:

* ``before``: the starting sizes (``--env-workers``, one rollout worker);
* ``added``: one env worker and one rollout worker more (``EmbodiedWorkers.resize``);
* ``removed``: back to the starting sizes.

For each resize: seconds from the request to the new sizes (``resize_s``) and, when workers were added, to the new
env worker's first simulator step (``request_to_first_step_s``), with where those seconds went
(``first_step_breakdown_s``: until the new worker's process runs its constructor, building its envs, until the
resize returned (the other new workers, layouts, weights), and from there to the first step). For each phase:
training env steps/s of whole iterations. Over the run: transitions (env steps) simulated (every env worker's own
counter, read before it leaves), trained (the actor's own counter of the env steps its updates trained on), lost
(simulated but not trained) and duplicated (trained twice, or left on the channel).

The worker set keeps one standby process beside the env and rollout groups (``standby_workers``, as an autoscaled
run does): a worker added is constructed in a process already started, with its modules imported.
"""

from __future__ import annotations

import json
import time

from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.runtime import Cluster
from embodied_rl.runtime.deadlines import get_within
from embodied_rl.workers.messages import TRAJECTORIES_KEY

STANDBY_WORKERS = 1

COUNTERS_TIMEOUT_S = 60.0
"""Deadline of the bench's own reads of worker counters."""

SETTINGS = ["rollout.num_workers=1", "policy.hidden_sizes=[64,64]", "algorithm.name=ppo", "algorithm.update_epochs=1",
            "algorithm.num_minibatches=2", "algorithm.target_kl=null"]


class ElasticLoop:
    """The trainer's synchronous iteration on ``workers``, counting what was simulated and what was trained."""

    def __init__(self, workers, steps: int):
        self.workers = workers
        self.steps = steps
        self.trained = 0  # the actor's counter of env steps trained on (``train/env_steps_trained``)
        self.simulated_by_left_workers = 0

    def iteration(self) -> None:
        """Sample a round, update on it (the round's own trajectories), install the new weights."""
        self.workers.sample(self.steps)
        metrics = self.workers.finish_update(self.workers.start_update())
        self.trained = int(metrics["train/env_steps_trained"])

    def iterations(self, rounds: int) -> float:
        """Run ``rounds`` iterations; returns training env steps/s."""
        start, steps = time.perf_counter(), 0
        for _ in range(rounds):
            self.iteration()
            self.workers.install_weights(self.workers.publish_weights())
            steps += self.workers.trajectories_sent * self.per_worker_steps()
        return steps / (time.perf_counter() - start)

    def per_worker_steps(self) -> int:
        return self.steps * int(self.workers.env.worker_kwargs["envs_per_worker"])

    def resize(self, env_workers: int, rollout_workers: int) -> dict:
        leaving = self.workers.env.workers[env_workers:]
        if leaving:
            self.simulated_by_left_workers += sum(c["steps_simulated"] for c in
                                                  get_within([w.counters.remote() for w in leaving],
                                                             COUNTERS_TIMEOUT_S, "the leaving env workers' counters"))
        old = len(self.workers.env)
        requested = time.time()
        metrics = self.workers.resize(env_workers, rollout_workers)
        resized = time.time()
        out = {"resize_s": metrics["scale/resize_s"]}
        if env_workers > old:
            self.iteration()  # the new workers' first round (trained on like any other)
            for group in (self.workers.env, self.workers.rollout):
                group.wait_standby()  # the next standby processes, started after the resize, are ready
            new = get_within(self.workers.env.workers[old].counters.remote(), COUNTERS_TIMEOUT_S,
                             "the new env worker's counters")
            out["request_to_first_step_s"] = new["first_step_at"] - requested
            out["first_step_breakdown_s"] = {
                "process_start": new["started_at"] - requested, "env_construction": new["envs_built_at"] -
                new["started_at"], "rest_of_resize": resized - new["envs_built_at"],
                "first_step": new["first_step_at"] - resized}
        return out

    def totals(self) -> dict:
        simulated = self.simulated_by_left_workers + sum(
            c["steps_simulated"] for c in get_within(self.workers.env.call("counters"), COUNTERS_TIMEOUT_S,
                                                     "the env workers' counters"))
        left_on_channel = get_within(self.workers.actor.workers[0].__ray_call__.remote(
            lambda actor: actor.channel.qsize(TRAJECTORIES_KEY) + len(actor.held)), COUNTERS_TIMEOUT_S,
            "the actor's queue")
        return {"transitions_simulated": simulated, "transitions_trained": self.trained,
                "transitions_lost": max(simulated - self.trained, 0),
                "transitions_duplicated": max(self.trained - simulated, 0) + left_on_channel}


def run_elastic_bench(task: str, env_workers: int, envs_per_worker: int, steps: int, rounds: int,
                      as_json: bool) -> int:
    from embodied_rl.runners.setup import start_workers

    for name, value in (("--env-workers", env_workers), ("--envs-per-worker", envs_per_worker),
                        ("--steps", steps), ("--rounds", rounds)):
        if value < 1:
            raise ConfigError(f"{name}={value} is out of range; allowed: an integer >= 1")
    config = load_train_config(task, None, [f"env.num_workers={env_workers}", f"env.envs_per_worker={envs_per_worker}",
                                            f"rollout.steps_per_iteration={steps}", *SETTINGS])
    with Cluster(config.cluster.address, config.cluster.num_cpus) as cluster:
        workers = start_workers(config, cluster, standby_workers=STANDBY_WORKERS)
        try:
            for group in (workers.env, workers.rollout):
                group.wait_standby()  # ready before anything is measured (they would compete for the cores)
            loop = ElasticLoop(workers, steps)
            workers.install_weights(workers.publish_weights())
            result = {"task": task, "rounds_per_phase": rounds, "steps_per_env_per_round": steps,
                      "standby_workers": STANDBY_WORKERS,
                      "sizes": {"before": [env_workers, 1], "added": [env_workers + 1, 2],
                                "removed": [env_workers, 1]}}
            result["before_steps_per_s"] = loop.iterations(rounds)
            result["add"] = loop.resize(env_workers + 1, 2)
            result["added_steps_per_s"] = loop.iterations(rounds)
            result["remove"] = loop.resize(env_workers, 1)
            result["removed_steps_per_s"] = loop.iterations(rounds)
            result.update(loop.totals())
        finally:
            workers.shutdown()
    result["added_vs_before"] = result["added_steps_per_s"] / result["before_steps_per_s"]
    result["removed_vs_before"] = result["removed_steps_per_s"] / result["before_steps_per_s"]
    if as_json:
        print(json.dumps(result))
        return 0
    print(f"elastic bench on {task} (whole iterations: sample, PPO update, weight sync; {rounds} per phase)")
    for phase in ("before", "added", "removed"):
        env, rollout = result["sizes"][phase]
        print(f"  {phase:8s} env={env} rollout={rollout}: {result[f'{phase}_steps_per_s']:8.1f} env steps/s")
    print(f"  add: resized in {result['add']['resize_s']:.2f} s, request to the new env worker's first step "
          f"{result['add']['request_to_first_step_s']:.2f} s; remove: {result['remove']['resize_s']:.2f} s")
    print("  request to first step: " + ", ".join(f"{name.replace('_', ' ')} {seconds:.2f} s" for name, seconds in
                                                 result["add"]["first_step_breakdown_s"].items()))
    print(f"  added/before {result['added_vs_before']:.2f}, removed/before {result['removed_vs_before']:.2f}")
    print(f"  transitions: simulated {result['transitions_simulated']}, trained {result['transitions_trained']}, "
          f"lost {result['transitions_lost']}, duplicated {result['transitions_duplicated']}")
    return 0
