"""Decoupled PPO (off_policy_correction='decoupled'): the ratio is clipped around the proximal policy and each
sample weighted by min(pi_prox / pi_behaviour, is_cap); checked against values worked out by hand."""

import math

import pytest
import torch

from embodied_rl.algorithms.embodied.base import PROXIMAL_LOGP
from embodied_rl.algorithms.embodied.ppo import PPO, PPOConfig

LOG = lambda *p: torch.log(torch.tensor(p))  # noqa: E731

# behaviour b, proximal p, current theta: w = min(p / b, 2) = [1, 1.2, 2]; r = theta / p = [1.2, 1, 0.5]
BEHAVIOUR, PROXIMAL, CURRENT = LOG(0.5, 0.5, 0.2), LOG(0.5, 0.6, 0.6), LOG(0.6, 0.6, 0.3)
ADVANTAGES = torch.tensor([1.0, -1.0, 1.0])


def _loss(correction: str, with_proximal: bool = True):
    ppo = PPO(PPOConfig(off_policy_correction=correction, is_cap=2.0, clip_coef=0.2, normalize_advantages=False,
                        vf_coef=0.0))
    ppo.updates = 1
    minibatch = dict(old_logp=BEHAVIOUR, advantages=ADVANTAGES, old_values=torch.zeros(3), returns=torch.zeros(3))
    if with_proximal:
        minibatch[PROXIMAL_LOGP] = PROXIMAL
    outputs = dict(logp=CURRENT, entropy=torch.zeros(3), values=torch.zeros(3))
    return ppo.loss(outputs, minibatch)


def test_decoupled_loss_matches_the_hand_computed_value():
    loss, metrics = _loss("decoupled")
    # w * max(-r A, -clip(r, 0.8, 1.2) A): 1 * -1.2, 1.2 * 1.0, 2 * max(-0.5, -0.8) = -1.0 -> mean -1/3
    assert loss.item() == pytest.approx(-1.0 / 3.0)
    assert metrics["is_weight_mean"] == pytest.approx((1.0 + 1.2 + 2.0) / 3)
    assert metrics["is_truncated_fraction"] == pytest.approx(1.0 / 3.0)
    r = torch.tensor([1.2, 1.0, 0.5])
    assert metrics["approx_kl"] == pytest.approx(float(((r - 1) - r.log()).mean()), rel=1e-5)  # to the proximal


def test_plain_ppo_clips_around_the_behaviour_policy():
    loss, metrics = _loss("behaviour", with_proximal=False)
    # r = theta / b = [1.2, 1.2, 1.5]: -1.2, 1.2, max(-1.5, -1.2) = -1.2 -> mean -0.4
    assert loss.item() == pytest.approx(-0.4)
    assert "is_weight_mean" not in metrics


def test_decoupled_equals_plain_ppo_when_the_proximal_policy_sampled():
    ppo = PPO(PPOConfig(off_policy_correction="decoupled", clip_coef=0.2, normalize_advantages=False, vf_coef=0.0))
    ppo.updates = 1
    minibatch = dict(old_logp=BEHAVIOUR, advantages=ADVANTAGES, old_values=torch.zeros(3), returns=torch.zeros(3))
    outputs = dict(logp=CURRENT, entropy=torch.zeros(3), values=torch.zeros(3))
    plain, _ = ppo.loss(outputs, dict(minibatch))
    decoupled, metrics = ppo.loss(outputs, dict(minibatch, **{PROXIMAL_LOGP: BEHAVIOUR.clone()}))
    assert decoupled.item() == pytest.approx(plain.item()) and metrics["is_weight_mean"] == 1.0


def test_bad_settings_are_named():
    problems = {key for key, _, _ in PPOConfig(off_policy_correction="vtrace", is_cap=0.5).problems()}
    assert problems == {"off_policy_correction", "is_cap"}
    assert math.isclose(PPOConfig().is_cap, 2.0)
