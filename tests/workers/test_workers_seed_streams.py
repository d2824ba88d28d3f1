"""No two envs of a run start an episode from the same initial state, also across env workers."""

import numpy as np
import ray

from embodied_rl.config import load_train_config
from embodied_rl.runners.setup import start_workers
from embodied_rl.workers.messages import TRAJECTORIES_KEY


def test_episodes_of_all_env_workers_start_from_distinct_states(cluster):
    # 2 env workers x 2 envs, 2-step episodes, 6 steps: 3 episodes per env, 12 initial states in all.
    config = load_train_config("maniskill_pickcube", None, [
        "env.num_workers=2", "env.envs_per_worker=2", "env.max_episode_steps=2", "rollout.steps_per_iteration=6",
        "algorithm.num_minibatches=2", "policy.hidden_sizes=[16]"])
    workers = start_workers(config, cluster, with_actor=False)
    try:
        workers.channel.subscribe(TRAJECTORIES_KEY)  # this test plays the actor's part
        workers.sample(6)
        chunks = []
        while len(chunks) < 2:
            chunks.extend(workers.channel.get_batch(TRAJECTORIES_KEY, timeout=60))
        obs = np.concatenate([c.obs for c in sorted(chunks, key=lambda c: c.env_rank)], axis=1)  # [6, 4, D]
        firsts = obs[[0, 2, 4]].reshape(12, -1).round(5)
        assert len({row.tobytes() for row in firsts}) == 12
    finally:
        workers.shutdown()
