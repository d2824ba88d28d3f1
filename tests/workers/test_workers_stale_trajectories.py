"""The actor trains a sampling round only on that round's trajectories (of the env workers the driver counts in it):
one of an earlier round, or of an env worker that died after sending it, is dropped and counted, never trained in a
later round; one of a later round (sampled while this round trains) waits for its own update."""

import numpy as np
import pytest
import ray

from embodied_rl.algorithms.embodied.ppo import PPOConfig
from embodied_rl.runtime import Channel, WorkerGroup
from embodied_rl.workers.actor_worker import ActorWorker
from embodied_rl.workers.messages import TRAJECTORIES_KEY, Trajectory

SPEC = dict(name="mlp", obs_dim=5, action_dim=2, hidden_sizes=[16], init_log_std=-0.5)
T, B = 4, 3  # steps and envs of each trajectory


def trajectory(env_rank: int, sampling_round: int) -> Trajectory:
    """A trajectory of round k, sampled (as in the synchronous loop) by policy version k - 1."""
    rng = np.random.default_rng(100 * sampling_round + env_rank)
    zeros = np.zeros((T, B), np.float32)
    return Trajectory(obs=rng.standard_normal((T, B, 5)).astype(np.float32),
                      actions=rng.standard_normal((T, B, 2)).astype(np.float32), logp=zeros - 1.0, values=zeros,
                      rewards=rng.standard_normal((T, B)).astype(np.float32), terminated=zeros.astype(bool),
                      truncated=zeros.astype(bool), success=zeros.astype(bool), final_values=zeros,
                      next_value=np.zeros(B, np.float32),
                      policy_versions=np.full(T, sampling_round - 1, np.int64), env_rank=env_rank,
                      sampling_round=sampling_round)


@pytest.fixture
def actor(cluster):
    channel = Channel.create("test-stale-trajectories", cluster)
    group = WorkerGroup(ActorWorker, "actor-stale", 1, cpus_per_worker=0.1, policy=SPEC,
                        algorithm=PPOConfig(num_minibatches=1, update_epochs=1), channel=channel, seed=0,
                        trajectory_timeout_s=30)
    yield group.workers[0], channel
    group.kill()


def test_a_round_trains_only_on_its_own_trajectories_and_stale_ones_are_dropped_and_counted(actor):
    actor, channel = actor

    def update(sampling_round: int, env_ranks: list[int]) -> dict:
        return ray.get(actor.update.remote(len(env_ranks), 0.0, False, sampling_round, env_ranks), timeout=120)

    # Round 1: env worker 1 died after its trajectory was sent (the driver counts it lost: ranks [0] only).
    for item in (trajectory(1, 1), trajectory(0, 1)):
        channel.put(item, TRAJECTORIES_KEY)
    first = update(1, [0])
    assert first["train/needs_more"] == 0 and first["train/transitions"] == T * B
    assert first["train/policy_staleness"] == 0  # only round 1's own (version 0) trajectories
    # Round 2 (both env workers), and one trajectory of round 3 that arrives while round 2 trains.
    for item in (trajectory(0, 2), trajectory(0, 3), trajectory(1, 2)):
        channel.put(item, TRAJECTORIES_KEY)
    second = update(2, [0, 1])
    assert second["train/transitions"] == 2 * T * B
    assert second["train/policy_staleness"] == 0  # round 1's trajectory of the dead worker was not trained here
    assert second["train/stale_trajectories_dropped"] == 1
    channel.put(trajectory(1, 3), TRAJECTORIES_KEY)
    third = update(3, [0, 1])  # the round 3 trajectory held since round 2, and the one just sent
    assert third["train/transitions"] == 2 * T * B and third["train/policy_staleness"] == 0
    assert third["train/stale_trajectories_dropped"] == 1
    assert third["train/env_steps_trained"] == 5 * T * B  # the actor's own count of what it trained on
    assert ray.get(actor.__ray_call__.remote(lambda a: (a.channel.qsize(TRAJECTORIES_KEY), len(a.held)))) == (0, 0)


def test_an_update_whose_trajectories_never_come_fails_naming_the_round_and_the_missing_ranks(actor):
    actor, channel = actor
    ray.get(actor.__ray_call__.remote(lambda a: setattr(a, "trajectory_timeout_s", 2.0)))
    channel.put(trajectory(0, 7), TRAJECTORIES_KEY)
    with pytest.raises(ray.exceptions.RayTaskError, match=r"1 of 2 trajectories of sampling round 7 arrived on key "
                                                          r"'trajectories' within 2 s \(env ranks missing: \[1\]\)"):
        ray.get(actor.update.remote(2, 0.0, False, 7, [0, 1]), timeout=60)
