"""Weight sync from the actor to every rollout worker by collective broadcast (gloo here, NCCL between GPUs)."""

import numpy as np
import ray

from embodied_rl.config import load_train_config
from embodied_rl.runners.setup import start_workers


def test_broadcast_gives_every_rollout_worker_the_actors_new_weights_and_version(cluster):
    config = load_train_config("maniskill_pushcube", None, [
        "env.num_workers=1", "env.envs_per_worker=2", "rollout.num_workers=2", "policy.hidden_sizes=[16]",
        "algorithm.num_minibatches=2", "algorithm.update_epochs=1"])
    workers = start_workers(config, cluster)
    try:
        workers.form_weight_broadcast()
        assert workers.broadcast_weights() == 0
        workers.sample(8)
        ray.get(workers.actor.call("update", 1))  # new weights, version 1
        actor_weights, actor_version = ray.get(workers.actor.workers[0].get_weights.remote())
        before = ray.get(workers.rollout.workers[1].get_weights.remote())[0]
        assert any(not np.array_equal(before[k], v) for k, v in actor_weights.items())
        assert workers.broadcast_weights() == actor_version == 1
        for rollout in workers.rollout.workers:
            weights, version = ray.get(rollout.get_weights.remote())
            assert version == 1 and weights.keys() == actor_weights.keys()
            for name, value in actor_weights.items():
                np.testing.assert_array_equal(weights[name], value)
    finally:
        workers.shutdown()
