"""Actor and rollout workers offload and onload between turns: values come back bit-exactly, training goes on
as if nothing happened, and an offloaded worker refuses to compute."""

import copy
import sys

import numpy as np
import pytest
import ray
import torch

from embodied_rl.algorithms.embodied.ppo import PPOConfig
from embodied_rl.runtime import Channel, WorkerGroup
from embodied_rl.workers.actor_worker import ActorWorker
from embodied_rl.workers.messages import REQUESTS_KEY, PolicyRequest, StopServing, responses_key
from embodied_rl.workers.rollout_worker import RolloutWorker

# Functions run inside the workers (through __ray_call__) travel by value (tests/ is not on their path).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SPEC = dict(name="mlp", obs_dim=5, action_dim=2, hidden_sizes=[16], init_log_std=-0.5)


def _train_step(worker, seed):
    """One Adam step on fixed data; gradients stay allocated afterwards (as after an update)."""
    generator = torch.Generator().manual_seed(seed)
    obs, actions = torch.randn(32, 5, generator=generator), torch.randn(32, 2, generator=generator)
    logp, entropy, values = worker.policy.evaluate(obs, actions)
    worker.optimizer.zero_grad(set_to_none=False)
    (-logp.mean() + values.square().mean() - 0.01 * entropy.mean()).backward()
    worker.optimizer.step()


def _state(worker) -> dict:
    """Weights, gradients and optimizer state, copied; plus whether the optimizer still steps the policy's
    own parameter objects."""
    optimizer_params = worker.optimizer.param_groups[0]["params"]
    return {"weights": {k: v.detach().clone() for k, v in worker.policy.state_dict().items()},
            "grads": [None if p.grad is None else p.grad.clone() for p in worker.policy.parameters()],
            "optimizer": copy.deepcopy(worker.optimizer.state_dict()),
            "same_parameters": all(a is b for a, b in zip(optimizer_params, worker.policy.parameters()))}


def _assert_equal(a: dict, b: dict):
    for key in a["weights"]:
        assert torch.equal(a["weights"][key], b["weights"][key]), key
    assert all(torch.equal(x, y) for x, y in zip(a["grads"], b["grads"]))
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]
    for index, state in a["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(value, b["optimizer"]["state"][index][key]), (index, key)


@pytest.fixture(scope="module")
def channel(cluster):
    return Channel.create("test-offload", cluster)


@pytest.fixture(scope="module")
def twin_actors(channel):
    """Two actors built identically (same seed, rank 0 each)."""
    groups = [WorkerGroup(ActorWorker, f"actor-{name}", 1, cpus_per_worker=0.1, policy=SPEC,
                          algorithm=PPOConfig(), channel=channel, seed=3) for name in ("a", "b")]
    yield [group.workers[0] for group in groups]
    for group in groups:
        group.kill()


def _call(worker, function, *args):
    return ray.get(worker.__ray_call__.remote(function, *args))


def test_actor_round_trip_is_bit_exact_and_training_goes_on_unchanged(twin_actors):
    offloaded, resident = twin_actors
    for actor in twin_actors:
        _call(actor, _train_step, 0)
    before = _call(offloaded, _state)
    _assert_equal(before, _call(resident, _state))  # the twins really are twins

    report = ray.get(offloaded.offload.remote())
    assert report.location == "host" and report.bytes == 0  # CPU: nothing to free, nothing copied
    with pytest.raises(ray.exceptions.RayTaskError, match="cannot update while offloaded; call onload"):
        ray.get(offloaded.update.remote(1))
    weights, version = ray.get(offloaded.get_weights.remote())  # publishing reads the host copy
    assert version == 0 and np.array_equal(weights["actor_log_std"], before["weights"]["actor_log_std"].numpy())
    assert ray.get(offloaded.onload.remote()).location == "device"

    after = _call(offloaded, _state)
    assert after["same_parameters"]
    _assert_equal(before, after)
    for actor in twin_actors:
        _call(actor, _train_step, 1)
    _assert_equal(_call(resident, _state), _call(offloaded, _state))


def test_rollout_installs_weights_while_offloaded_and_serves_them_after_onload(channel):
    group = WorkerGroup(RolloutWorker, "rollout-offload", 1, cpus_per_worker=0.1, policy=SPEC, channel=channel)
    rollout = group.workers[0]
    try:
        ray.get(rollout.offload.remote())
        with pytest.raises(ray.exceptions.RayTaskError, match="cannot serve while offloaded"):
            ray.get(rollout.serve.remote())
        torch.manual_seed(11)
        from embodied_rl.models import build_policy

        fresh = build_policy(**SPEC)
        weights = {k: v.detach().numpy() for k, v in fresh.state_dict().items()}
        assert ray.get(rollout.load_weights.remote((weights, 5))) == 5
        ray.get(rollout.onload.remote())

        channel.subscribe(responses_key(0))  # this test plays an env worker
        serving = rollout.serve.remote()
        obs = np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)
        channel.put(PolicyRequest(0, obs, None, deterministic=True), REQUESTS_KEY)
        response = channel.get(responses_key(0), timeout=60)
        channel.put(StopServing(), REQUESTS_KEY)
        ray.get(serving)
        expected_actions, _, expected_values = fresh.act(torch.as_tensor(obs), deterministic=True)
        assert response.policy_version == 5
        assert np.array_equal(response.actions, expected_actions.numpy())
        assert np.array_equal(response.values, expected_values.numpy())
    finally:
        group.kill()
