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


def test_evaluation_runs_one_full_length_episode_per_named_state(workers):
    """7 states over 2 workers x 2 envs: each worker takes every other state, its last batch is partial."""
    ray.get(workers.rollout.call("load_weights", _weights(workers.policy_spec, version=3)))
    episodes = workers.evaluate(list(range(100, 107)))
    assert [e["state_id"] for e in episodes] == list(range(100, 107))
    assert all(e["episode_length"] == 4 for e in episodes)
    assert all(set(e) >= {"success_once", "success_at_end", "episode_return"} for e in episodes)
    # A state's episode depends on the state, not on the worker or env that ran it (deterministic actions; the
    # policy's batch differs, so returns agree up to float rounding).
    alone = workers.evaluate([105, 103])
    by_state = {e["state_id"]: e["episode_return"] for e in episodes}
    assert [e["state_id"] for e in alone] == [103, 105]
    assert [e["episode_return"] for e in alone] == pytest.approx([by_state[103], by_state[105]], abs=1e-5)
    assert len(set(by_state.values())) == len(by_state)  # and different states do differ


def test_evaluation_runs_at_any_time_limit(workers):
    ray.get(workers.rollout.call("load_weights", _weights(workers.policy_spec, version=3)))
    episodes = workers.evaluate([7, 8, 9], max_episode_steps=6)
    assert [e["episode_length"] for e in episodes] == [6, 6, 6]
    assert [e["episode_length"] for e in workers.evaluate([7])] == [4]  # the envs' own limit again


def _weights(spec, version):
    from embodied_rl.models import build_policy

    policy = build_policy(**spec)
    return {k: v.detach().numpy() for k, v in policy.state_dict().items()}, version
