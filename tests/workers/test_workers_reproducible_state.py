"""What exact resume relies on in the workers: seeded requests get the same actions whatever arrives with them,
and the actor's checkpoint state carries the algorithm's counters and the frozen KL reference."""

import copy
import sys

import numpy as np
import ray
import torch

from embodied_rl.algorithms.embodied.grpo import GroupConfig
from embodied_rl.algorithms.embodied.ppo import PPOConfig
from embodied_rl.runtime import Channel, WorkerGroup
from embodied_rl.workers.actor_worker import ActorWorker
from embodied_rl.workers.messages import REQUESTS_KEY, PolicyRequest, StopServing, responses_key
from embodied_rl.workers.rollout_worker import RolloutWorker

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SPEC = dict(name="mlp", obs_dim=5, action_dim=2, hidden_sizes=[16], init_log_std=-0.5)
OBS = np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)


def _serve(channel, rollout, requests) -> dict:
    """Put ``requests`` at once, serve them, return the actions answered to each env rank."""
    serving = rollout.serve.remote()
    for request in requests:
        channel.put(request, REQUESTS_KEY)
    answers = {r.env_rank: channel.get(responses_key(r.env_rank), timeout=60).actions for r in requests}
    channel.put(StopServing(), REQUESTS_KEY)
    ray.get(serving)
    return answers


def test_seeded_requests_get_the_same_actions_alone_or_batched(cluster):
    channel = Channel.create("test-seeded", cluster)
    group = WorkerGroup(RolloutWorker, "rollout-seeded", 1, cpus_per_worker=0.1, policy=SPEC, channel=channel)
    try:
        for rank in (0, 1):
            channel.subscribe(responses_key(rank))  # this test plays two env workers
        rollout = group.workers[0]
        together = _serve(channel, rollout, [PolicyRequest(0, OBS, None, sample_seed=7),
                                             PolicyRequest(1, OBS[:2], None, sample_seed=8)])
        alone = _serve(channel, rollout, [PolicyRequest(0, OBS, None, sample_seed=7)])
        assert np.array_equal(together[0], alone[0])
        other_seed = _serve(channel, rollout, [PolicyRequest(0, OBS, None, sample_seed=9)])
        assert not np.array_equal(other_seed[0], alone[0])
        unseeded = [_serve(channel, rollout, [PolicyRequest(0, OBS, None)])[0] for _ in range(2)]
        assert not np.array_equal(*unseeded)  # without a seed, draws go on from the worker's own generator
    finally:
        group.kill()


def _set_up(worker):
    """A trained-looking actor: a reference that differs from the policy, and an algorithm counter."""
    worker.reference = copy.deepcopy(worker.policy).eval()
    with torch.no_grad():
        for p in worker.policy.parameters():
            p.add_(0.5)
    if hasattr(worker.algorithm, "updates"):
        worker.algorithm.updates = 7


def _inspect(worker):
    reference = {k: v.clone() for k, v in worker.reference.state_dict().items()} if worker.reference else None
    return reference, {k: v.clone() for k, v in worker.policy.state_dict().items()}, worker.algorithm.state_dict()


def test_actor_state_keeps_the_kl_reference_and_the_algorithms_counters(cluster):
    channel = Channel.create("test-actor-state", cluster)
    for name, algorithm in (("grpo", GroupConfig(kl_coef=0.1)), ("ppo", PPOConfig())):
        groups = [WorkerGroup(ActorWorker, f"actor-state-{name}-{i}", 1, cpus_per_worker=0.1, policy=SPEC,
                              algorithm=algorithm, channel=channel, seed=seed) for i, seed in enumerate((1, 2))]
        try:
            saved, loaded = (g.workers[0] for g in groups)
            ray.get(saved.__ray_call__.remote(_set_up))
            state = ray.get(saved.training_state.remote())
            ray.get(loaded.load_training_state.remote(state["weights"], state["trainer_state"]))
            reference, policy, counters = ray.get(saved.__ray_call__.remote(_inspect))
            got_reference, got_policy, got_counters = ray.get(loaded.__ray_call__.remote(_inspect))
            assert all(torch.equal(policy[k], got_policy[k]) for k in policy)
            assert all(torch.equal(reference[k], got_reference[k]) for k in reference)
            assert not torch.equal(got_reference["actor_log_std"], got_policy["actor_log_std"])
            assert got_counters == counters == ({"updates": 7} if name == "ppo" else {})
        finally:
            for g in groups:
                g.kill()
