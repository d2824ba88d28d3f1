"""Env and rollout workers exchange requests through the channel and build correct trajectories."""

import numpy as np
import pytest
import ray

from embodied_rl.config import load_train_config
from embodied_rl.runners.setup import start_workers
from embodied_rl.workers.messages import TRAJECTORIES_KEY


@pytest.fixture(scope="module", params=[1, 2], ids=["one-stage", "two-pipeline-stages"])
def workers(cluster, request):
    config = load_train_config("maniskill_pushcube", None, [
        "env.num_workers=2", "env.envs_per_worker=2", "env.max_episode_steps=4", "rollout.num_workers=1",
        "policy.hidden_sizes=[16]", f"env.pipeline_stages={request.param}"])
    running = start_workers(config, cluster, with_actor=False)
    yield running
    running.shutdown()


def test_trajectories_have_the_documented_shapes_and_bootstrap_truncations(workers):
    ray.get(workers.rollout.call("load_weights", _weights(workers.policy_spec, version=7)))
    workers.channel.subscribe(TRAJECTORIES_KEY)  # this test plays the actor's part
    episodes = workers.sample(10)
    chunks = []
    while len(chunks) < 2:
        chunks.extend(workers.channel.get_batch(TRAJECTORIES_KEY, timeout=60))
    assert sorted(c.env_rank for c in chunks) == [0, 1]
    for chunk in chunks:
        assert chunk.obs.shape == (10, 2, 35) and chunk.actions.shape == (10, 2, 8)
        assert chunk.logp.shape == chunk.values.shape == chunk.rewards.shape == (10, 2)
        assert chunk.next_value.shape == (2,)
        assert (chunk.policy_versions == 7).all()
        # 4-step episodes: truncated at steps 3 and 7 (0-based), every env.
        assert chunk.truncated[[3, 7]].all() and chunk.truncated.sum() == 4
        # Steps that ended an episode carry V(final observation); the others stay zero.
        ended = chunk.truncated | chunk.terminated
        assert np.all(chunk.final_values[ended] != 0) and np.all(chunk.final_values[~ended] == 0)
    # 2 workers x 2 envs x 2 finished episodes of length 4
    assert len(episodes) == 8 and all(e["episode_length"] == 4 for e in episodes)


def test_evaluation_runs_the_requested_number_of_full_length_episodes(workers):
    episodes = workers.evaluate(6)
    assert len(episodes) == 6  # 3 per env worker
    assert all(e["episode_length"] == 4 for e in episodes)
    assert all(set(e) >= {"success_once", "success_at_end", "episode_return"} for e in episodes)


def _weights(spec, version):
    from embodied_rl.models import build_policy

    policy = build_policy(**spec)
    return {k: v.detach().numpy() for k, v in policy.state_dict().items()}, version
