"""The categorical policy of discrete-action tasks: one-hot actions, log-probs, entropies and the SFT loss against
the same quantities computed by hand from its logits."""

import math

import pytest
import torch

from embodied_rl.models import build_policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def policy_with_logits(logits: torch.Tensor):
    """A 3-action policy whose actor returns ``logits`` [3] for every state (its last layer set by hand)."""
    policy = build_policy("mlp_categorical", obs_dim=4, action_dim=3, hidden_sizes=[8])
    last = policy.actor_logits[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(logits)
    return policy


def test_actions_are_one_hot_with_the_log_prob_of_their_index():
    policy = policy_with_logits(torch.tensor([0.0, math.log(3.0), 0.0]))  # probabilities 0.2, 0.6, 0.2
    obs = torch.randn(5, 4)
    actions, logp, values = policy.act(obs, deterministic=True)
    assert actions.shape == (5, 3) and torch.equal(actions, torch.tensor([[0.0, 1.0, 0.0]] * 5))
    assert torch.allclose(logp, torch.full((5,), math.log(0.6)), atol=1e-6) and values.shape == (5,)
    torch.manual_seed(0)
    sampled, sampled_logp, _ = policy.act(torch.randn(4000, 4))
    assert torch.all(sampled.sum(-1) == 1)
    assert abs(sampled[:, 1].mean().item() - 0.6) < 0.03  # drawn from the distribution, not its argmax
    expected = torch.log(torch.tensor([0.2, 0.6, 0.2]))[sampled.argmax(-1)]
    assert torch.allclose(sampled_logp, expected, atol=1e-6)


def test_evaluate_and_the_supervised_loss_match_hand_computed_values():
    policy = policy_with_logits(torch.tensor([0.0, math.log(3.0), 0.0]))
    obs = torch.randn(2, 4)
    actions = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    logp, entropy, values = policy.evaluate(obs, actions)
    assert torch.allclose(logp, torch.log(torch.tensor([0.2, 0.2])), atol=1e-6)
    hand_entropy = -(0.2 * math.log(0.2) * 2 + 0.6 * math.log(0.6))
    assert torch.allclose(entropy, torch.full((2,), hand_entropy), atol=1e-6)
    assert torch.allclose(values, policy.value(obs))
    # cross-entropy of the demonstrated indices 0 and 2: -log 0.2 each
    assert policy.supervised_loss(obs, actions).item() == pytest.approx(-math.log(0.2), abs=1e-6)
