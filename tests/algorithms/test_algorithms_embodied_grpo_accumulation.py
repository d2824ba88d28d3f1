"""GRPO updates built from ``groups_per_update`` kept groups, accumulated over sampling rounds: the same update as
one round holding the same episodes, and the round count bounded by ``max_sampling_rounds``."""

import pytest
import torch

from embodied_rl.algorithms.embodied.grpo import GroupConfig, GroupRelative
from embodied_rl.models import build_policy

OBS_DIM, ACTION_DIM, LENGTH, GROUP = 3, 2, 3, 2


def _round(policy, envs: int, success_at: dict, seed: int) -> dict:
    """A lock-step batch ``[T=LENGTH, B=envs]`` of one episode per env, actions and log-probs from ``policy``
    (log-probs nudged so that ratios are not all 1); ``success_at[env] = step`` where that env succeeds."""
    generator = torch.Generator().manual_seed(seed)
    obs = torch.randn(LENGTH, envs, OBS_DIM, generator=generator)
    with torch.no_grad():
        actions, logp, _ = policy.act(obs.reshape(-1, OBS_DIM))[:3]
    logp = logp.reshape(LENGTH, envs) + 0.3 * torch.randn(LENGTH, envs, generator=generator)
    success = torch.zeros(LENGTH, envs, dtype=torch.bool)
    for env, step in success_at.items():
        success[step, env] = True
    done = torch.zeros(LENGTH, envs, dtype=torch.bool)
    done[-1] = True
    return dict(obs=obs, actions=actions.reshape(LENGTH, envs, ACTION_DIM), logp=logp, rewards=torch.zeros(
        LENGTH, envs), terminated=torch.zeros_like(done), truncated=done, success=success)


def _joined(first: dict, second: dict) -> dict:
    """The two rounds' envs side by side: one round of both rounds' groups, the same episodes in the same order."""
    return {k: torch.cat([first[k], second[k]], dim=1) for k in first}


def _loss_and_gradients(algorithm, policy, samples):
    outputs = algorithm.evaluate(policy, samples)
    loss, _ = algorithm.loss(outputs, samples)
    return loss, torch.autograd.grad(loss, list(policy.parameters()), allow_unused=True)


def test_two_accumulated_rounds_of_four_groups_make_the_update_of_one_round_of_eight():
    torch.manual_seed(0)
    policy = build_policy("mlp", OBS_DIM, ACTION_DIM, hidden_sizes=[8])
    # 4 groups of 2 per round; successes at different steps so episodes train on different step counts
    first = _round(policy, 8, {0: 1, 3: 0, 4: 2, 6: 1, 7: 2}, seed=1)
    second = _round(policy, 8, {1: 0, 2: 2, 5: 1}, seed=2)
    algorithm = GroupRelative(GroupConfig(name="grpo", group_size=GROUP, groups_per_update=8,
                                          loss_agg="seq-mean-token-mean", max_sampling_rounds=4))
    rounds = [algorithm.select(first)[0], algorithm.select(second)[0]]
    assert not algorithm.enough(rounds[:1], rounds=1) and algorithm.enough(rounds, rounds=2)
    whole = [algorithm.select(_joined(first, second))[0]]
    assert algorithm.enough(whole, rounds=1)

    accumulated, metrics = algorithm.prepare(rounds)
    single, single_metrics = algorithm.prepare(whole)
    assert metrics["train/groups_trained"] == single_metrics["train/groups_trained"] == 8
    assert metrics["train/steps_trained"] == single_metrics["train/steps_trained"]
    loss, gradients = _loss_and_gradients(algorithm, policy, accumulated)
    expected_loss, expected_gradients = _loss_and_gradients(algorithm, policy, single)
    assert loss.abs() > 1e-4  # a loss that carries a signal
    assert torch.allclose(loss, expected_loss, atol=1e-6)
    trained = [(g, e) for g, e in zip(gradients, expected_gradients) if e is not None]
    assert trained and any(e.abs().max() > 1e-4 for _, e in trained)
    assert all(g is not None and torch.allclose(g, e, atol=1e-6) for g, e in trained)


def _informative_round(informative: int) -> dict:
    """4 envs, 2 episode slots of 2 steps: 4 groups of 2, the first ``informative`` of them with one success."""
    T, B, L = 4, 4, 2
    done = torch.zeros(T, B, dtype=torch.bool)
    done[L - 1::L] = True
    success = torch.zeros(T, B, dtype=torch.bool)
    for group in range(informative):  # groups in order: slot 0 envs (0,1), (2,3); slot 1 envs (0,1), (2,3)
        slot, env = divmod(group * GROUP, B)
        success[slot * L, env] = True
    obs = torch.arange(T * B, dtype=torch.float32).reshape(T, B, 1)
    return dict(obs=obs, actions=obs.clone(), logp=torch.zeros(T, B), rewards=torch.zeros(T, B),
                terminated=torch.zeros(T, B, dtype=torch.bool), truncated=done, success=success)


def test_enough_asks_for_rounds_until_the_kept_groups_reach_the_count_and_stops_at_max_sampling_rounds():
    algorithm = GroupRelative(GroupConfig(group_size=GROUP, dynamic_sampling=True, groups_per_update=3,
                                          max_sampling_rounds=5))
    rounds = [algorithm.select(_informative_round(1))[0] for _ in range(3)]  # one kept group of 4 each
    assert [algorithm.enough(rounds[:n], rounds=n) for n in (1, 2, 3)] == [False, False, True]
    assert algorithm.prepare(rounds)[1]["train/groups_trained"] == 3

    # More than one round's worth (4 groups a round): today's behaviour would stop at 4.
    six = GroupRelative(GroupConfig(group_size=GROUP, dynamic_sampling=True, groups_per_update=6))
    full = [six.select(_informative_round(4))[0] for _ in range(2)]
    assert not six.enough(full[:1], rounds=1) and six.enough(full, rounds=2)
    assert six.prepare(full)[1]["train/groups_trained"] == 8  # every kept group of the last round trains

    # The bound: after max_sampling_rounds rounds the update trains on what was kept, fewer than asked.
    bounded = GroupRelative(GroupConfig(group_size=GROUP, dynamic_sampling=True, groups_per_update=3,
                                        max_sampling_rounds=2))
    assert not bounded.enough(rounds[:1], rounds=1) and bounded.enough(rounds[:2], rounds=2)
    assert bounded.prepare(rounds[:2])[1]["train/groups_trained"] == 2

    # None keeps one round's worth: refilled up to 4 groups and cut there
    today = GroupRelative(GroupConfig(group_size=GROUP, dynamic_sampling=True, max_sampling_rounds=5))
    mixed = [today.select(_informative_round(n))[0] for n in (2, 4)]
    assert not today.enough(mixed[:1], rounds=1) and today.enough(mixed, rounds=2)
    assert today.prepare(mixed)[1]["train/groups_trained"] == 4


@pytest.mark.parametrize("value", [0, -2, 2.5, True, "8"])
def test_a_bad_groups_per_update_is_one_clear_problem(value):
    problems = list(GroupConfig(groups_per_update=value).problems())
    assert problems == [("groups_per_update", value, "null (one sampling round's worth) or an integer >= 1")]
    assert not list(GroupConfig(groups_per_update=16).problems())
