"""GRPO groups: envs with equal state ids start identical, others differ, also when a group spans env workers."""

import numpy as np
import ray

from embodied_rl.config import load_train_config
from embodied_rl.runners.setup import start_workers
from embodied_rl.workers.messages import TRAJECTORIES_KEY


def test_groups_spanning_env_workers_start_every_episode_from_one_shared_state(cluster):
    # 4 env workers x 1 env, groups of 2: (worker 0, worker 1) and (worker 2, worker 3); 3-step episodes.
    config = load_train_config("maniskill_pickcube", None, [
        "env.num_workers=4", "env.envs_per_worker=1", "env.max_episode_steps=3", "rollout.steps_per_iteration=6",
        "algorithm.name=grpo", "algorithm.group_size=2", "algorithm.num_minibatches=2",
        "policy.hidden_sizes=[16]"])
    workers = start_workers(config, cluster, with_actor=False)
    try:
        ids = ray.get(workers.env.call("group_state_ids", 0))
        assert ids[0] == ids[1] and ids[2] == ids[3] and ids[0] != ids[2]
        workers.channel.subscribe(TRAJECTORIES_KEY)  # this test plays the actor's part
        workers.sample(6)
        chunks = []
        while len(chunks) < 4:
            chunks.extend(workers.channel.get_batch(TRAJECTORIES_KEY, timeout=60))
        obs = np.concatenate([c.obs for c in sorted(chunks, key=lambda c: c.env_rank)], axis=1)  # [6, 4, D]
        assert (np.concatenate([c.truncated for c in chunks], axis=1)[[2, 5]]).all()  # lock-step episodes
        for start in (0, 3):  # the first step of each episode
            first = obs[start]
            np.testing.assert_array_equal(first[0], first[1])
            np.testing.assert_array_equal(first[2], first[3])
            assert not np.allclose(first[0], first[2])
        assert not np.allclose(obs[0, 0], obs[3, 0])  # the next episode starts from a new state
    finally:
        workers.shutdown()
