"""Pi0 at ``ratio_level=decision``: one log-prob per decision, the sum of its token (Gaussian coordinate) log-probs
for the same stored chain, checked against the Flow-SDE transition densities computed by hand."""

import math

import pytest
import torch

from embodied_rl.algorithms.embodied.grpo import GroupConfig, GroupRelative
from embodied_rl.models.pi0 import CHAIN_KEY
from pi0_helpers import observations, tiny_policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _by_hand(policy, obs, chain: torch.Tensor) -> torch.Tensor:
    """Per decision ``[B]`` (float64): the sum over the S denoising steps, the chunk and the env's action dims of
    ``log N(x_{i+1}; mean_i, std_i^2)``, with Flow-SDE's ``mean = x + (v + sigma^2 / (2t) (x + (1 - t) v)) dt``,
    ``std = sigma sqrt(|dt|)``, ``sigma = a sqrt(tc / (1 - tc))``, ``tc = min(t, 1 - 1/S)``, v the expert's
    velocity at ``(x_i, t_i)``."""
    steps, level, dims = policy.settings.num_denoising_steps, policy.settings.noise_level, policy.action_dim
    total = torch.zeros(len(chain), dtype=torch.float64)
    with torch.no_grad():
        prefix = policy._prefix(obs)
        for i in range(steps):
            t, dt = 1.0 - i / steps, -1.0 / steps
            x = chain[:, i]
            v = policy._velocity(prefix, x, t)[0].double()
            x, following = x.double(), chain[:, i + 1].double()
            tc = min(t, 1.0 - 1.0 / steps)
            sigma = level * math.sqrt(tc / (1.0 - tc))
            mean = x + (v + sigma ** 2 / (2 * t) * (x + (1 - t) * v)) * dt
            std = sigma * math.sqrt(abs(dt))
            density = -((following - mean) ** 2) / (2 * std ** 2) - math.log(std) - 0.5 * math.log(2 * math.pi)
            total += density[..., :dims].sum(dim=(1, 2))
    return total


@pytest.mark.parametrize("options", [{}, {"stochastic_steps": [0, 2]}], ids=["all_steps", "two_steps"])
def test_the_decision_log_prob_is_the_sum_of_the_token_log_probs_of_the_stored_chain(options):
    policy = tiny_policy(chunk=2, steps=3, action_dim=4, **options)
    obs = observations(batch=3)
    actions, logp, _, stored = policy.act(obs)
    full = {**obs, **stored}
    token_logp, _, _ = policy.evaluate_tokens(full, actions)
    decision_logp, _, _ = policy.evaluate(full, actions)
    stochastic = len(policy.settings.stochastic_steps or range(3))
    assert token_logp.shape == (3, stochastic * 2 * 4)  # one per Gaussian coordinate: steps x chunk x action dims
    torch.testing.assert_close(decision_logp, token_logp.sum(-1), atol=1e-5, rtol=0)
    torch.testing.assert_close(decision_logp, logp, atol=1e-4, rtol=0)  # act's own sum, stored at sampling
    if not options:  # every step stochastic: the hand computation covers them all
        torch.testing.assert_close(decision_logp.double(), _by_hand(policy, obs, stored[CHAIN_KEY]), atol=1e-3,
                                   rtol=1e-6)

    # GRPO at ratio_level=decision asks the policy for that sum (no token log-probs), and its ratio is one per
    # decision: exp(decision log-prob - the stored one), clipped once.
    grpo = GroupRelative(GroupConfig(ratio_level="decision", clip_low=0.2, clip_high=0.2, loss_agg="token-mean"))
    outputs = grpo.evaluate(policy, {"obs": full, "actions": actions})
    assert "token_logp" not in outputs
    torch.testing.assert_close(outputs["logp"], token_logp.sum(-1), atol=1e-5, rtol=0)
    old = outputs["logp"].detach() - torch.tensor([0.1, -0.1, 0.5])  # ratios e^0.1, e^-0.1, e^0.5 (clipped)
    loss, metrics = grpo.loss(outputs, {"obs": full, "old_logp": old, "advantages": torch.ones(3)})
    expected = -(math.exp(0.1) + math.exp(-0.1) + 1.2) / 3
    assert loss.item() == pytest.approx(expected, abs=1e-5) and metrics["clip_fraction"] == pytest.approx(1 / 3)


def test_the_decision_ratio_differs_from_the_token_ratios():
    """The same nudge spread over the tokens: one decision ratio e^0.3 is clipped, the token ratios are not."""
    policy = tiny_policy(chunk=1, steps=2, action_dim=4)
    obs = observations(batch=1)
    actions, _, _, stored = policy.act(obs)
    full = {**obs, **stored}
    token = GroupRelative(GroupConfig(ratio_level="token", clip_low=0.2, clip_high=0.2, loss_agg="token-mean"))
    outputs = token.evaluate(policy, {"obs": full, "actions": actions})
    M = outputs["token_logp"].shape[1]
    nudged = {**full, "stored.token_logp": (outputs["token_logp"] - 0.3 / M).detach()}
    minibatch = {"obs": nudged, "old_logp": (outputs["logp"] - 0.3).detach(), "advantages": torch.ones(1)}
    _, token_metrics = token.loss(outputs, minibatch)
    decision = GroupRelative(GroupConfig(ratio_level="decision", clip_low=0.2, clip_high=0.2, loss_agg="token-mean"))
    _, decision_metrics = decision.loss(decision.evaluate(policy, {"obs": full, "actions": actions}), minibatch)
    assert token_metrics["clip_fraction"] == 0.0 and decision_metrics["clip_fraction"] == 1.0
