import pytest
import torch

from embodied_rl.algorithms.losses import kl_penalty, policy_loss, value_loss


def close(actual, expected, atol=1e-5):
    actual = torch.as_tensor(actual)
    torch.testing.assert_close(
        actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0
    )


def _token_case():
    # old_logp = 0, so ratio = exp(logp). clip range [0.8, 1.28].
    # row 0 (A=+1): ratios [1.5, 0.7, 1.0]
    # row 1 (A=-2): ratios [0.5, 1.1, padding with logp=-inf]
    logp = torch.log(torch.tensor([[1.5, 0.7, 1.0], [0.5, 1.1, 1.0]]))
    logp[1, 2] = -float("inf")
    old_logp = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    return logp, old_logp, adv, mask


# Per-token losses -max(rA, clip(r)A) -> loss = max(-rA, -clip(r)A):
#   row 0: r=1.5 -> max(-1.5, -1.28) = -1.28 (clipped); r=0.7 -> max(-0.7, -0.8) = -0.7;
#          r=1.0 -> -1.0
#   row 1: r=0.5 -> max(1.0, 1.6) = 1.6 (clipped);    r=1.1 -> max(2.2, 2.2) = 2.2
#   row sums: -2.98 and 3.8; total 0.82 over 5 valid tokens, L = 3
@pytest.mark.parametrize(
    "agg, expected",
    [
        ("token-mean", 0.82 / 5),  # 0.164
        ("seq-mean-token-mean", (-2.98 / 3 + 3.8 / 2) / 2),  # 0.4533333
        ("seq-mean-token-sum", (-2.98 + 3.8) / 2),  # 0.41
        ("seq-mean-token-sum-norm", 0.82 / 3),  # 0.2733333
    ],
)
def test_token_level_ppo_each_agg_mode(agg, expected):
    logp, old_logp, adv, mask = _token_case()
    loss, _ = policy_loss(logp, old_logp, adv, mask, 0.2, 0.28, agg=agg)
    assert torch.isfinite(loss)
    close(loss, expected)


def test_token_level_ppo_metrics():
    logp, old_logp, adv, mask = _token_case()
    _, m = policy_loss(logp, old_logp, adv, mask, 0.2, 0.28)
    assert all(isinstance(v, float) for v in m.values())
    assert m["clip_fraction"] == pytest.approx(2 / 5)
    assert m["dual_clip_fraction"] == 0.0
    assert m["ratio_mean"] == pytest.approx(4.8 / 5)  # (1.5+0.7+1.0+0.5+1.1)/5
    # k3 per token (r-1) - ln r:
    #  1.5: 0.5 - 0.4054651 = 0.0945349   0.7: -0.3 + 0.3566749 = 0.0566749   1.0: 0
    #  0.5: -0.5 + 0.6931472 = 0.1931472  1.1: 0.1 - 0.0953102 = 0.0046898
    assert m["approx_kl"] == pytest.approx(0.3490468 / 5, abs=1e-6)


def test_advantages_b_broadcast_equals_b_by_l():
    logp, old_logp, adv, mask = _token_case()
    a, _ = policy_loss(logp, old_logp, adv, mask, 0.2, 0.28)
    b, _ = policy_loss(logp, old_logp, adv[:, None].expand(2, 3), mask, 0.2, 0.28)
    close(a, b.item())


def test_per_token_advantages_are_used_per_token():
    # ratio 1 everywhere -> loss_t = -A_t; token-mean over the 3 valid tokens
    logp = torch.zeros(1, 4)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    adv = torch.tensor([[1.0, 2.0, 6.0, 100.0]])
    loss, _ = policy_loss(logp, logp, adv, mask, 0.2, 0.2)
    close(loss, -3.0)


def test_dual_clip_caps_negative_advantage_loss():
    # L=1, clip [0.8, 1.2], c=3
    #  A=-2, r=5:   max(10, 2.4) = 10 -> capped at 3*2 = 6
    #  A=+1, r=5:   max(-5, -1.2) = -1.2 (dual clip never touches A>0)
    #  A=-2, r=0.5: max(1.0, 1.6) = 1.6 < 6 -> unchanged
    logp = torch.log(torch.tensor([[5.0], [5.0], [0.5]])).requires_grad_()
    old = torch.zeros(3, 1)
    adv = torch.tensor([-2.0, 1.0, -2.0])
    mask = torch.ones(3, 1)
    plain, _ = policy_loss(logp, old, adv, mask, 0.2, 0.2)
    close(plain, (10 - 1.2 + 1.6) / 3)
    dual, m = policy_loss(logp, old, adv, mask, 0.2, 0.2, dual_clip=3.0)
    close(dual, (6 - 1.2 + 1.6) / 3)
    assert m["dual_clip_fraction"] == pytest.approx(1 / 3)
    # unclipped token 0 loss is -r*A = 2r -> grad 2r/3 = 10/3; once capped it is a constant
    (g_plain,) = torch.autograd.grad(plain, logp)
    (g_dual,) = torch.autograd.grad(dual, logp)
    close(g_plain[0, 0], 10.0 / 3.0)
    assert g_dual[0, 0] == 0.0


def test_dual_clip_must_exceed_one():
    logp = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="dual_clip"):
        policy_loss(logp, logp, torch.ones(1), torch.ones(1, 1), 0.2, 0.2, dual_clip=1.0)


def test_sequence_level_ratio_gspo():
    # log ratios: row 0 [0.2, -0.4] -> mean -0.1 -> r = exp(-0.1) = 0.9048374 (unclipped)
    #             row 1 [0.6, pad=5.0] -> mean over valid 0.6 -> r = 1.8221188 -> clipped 1.2
    # A = 1, clip [0.8, 1.2]; token-mean over 3 tokens: (2 * -0.9048374 - 1.2) / 3 = -1.0032249
    logp = torch.tensor([[0.2, -0.4], [0.6, 5.0]], requires_grad=True)
    old = torch.zeros(2, 2)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.ones(2)
    loss, m = policy_loss(logp, old, adv, mask, 0.2, 0.2, level="sequence")
    close(loss, -1.0032249)
    assert m["clip_fraction"] == pytest.approx(1 / 3)
    assert m["ratio_mean"] == pytest.approx((2 * 0.9048374 + 1.8221188) / 3, abs=1e-6)
    # token level on the same inputs differs: exp(0.2)=1.2214 -> -1.2, exp(-0.4)=0.67032,
    # exp(0.6) -> -1.2: (-1.2 - 0.6703200 - 1.2) / 3 = -1.0234400
    tok, _ = policy_loss(logp, old, adv, mask, 0.2, 0.2, level="token")
    close(tok, -1.0234400)
    loss.backward()
    # d/d logp_{0,j} of -(2/3) exp((lp00 + lp01)/2) = -(2/3) * r/2 = -r/3 = -0.3016125;
    # row 1 is clipped -> no grad
    close(logp.grad, [[-0.3016125, -0.3016125], [0.0, 0.0]])


def test_bad_agg_and_level_raise_with_allowed_values():
    logp = torch.zeros(1, 2)
    args = (logp, logp, torch.ones(1), torch.ones(1, 2), 0.2, 0.2)
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm"):
        policy_loss(*args, agg="mean")
    with pytest.raises(ValueError, match="sequence"):
        policy_loss(*args, level="word")


def test_kl_penalty_kinds():
    logp = torch.tensor([0.0, -1.0])
    ref = torch.tensor([-0.5, -0.5])
    close(kl_penalty(logp, ref), [0.5, -0.5])
    close(kl_penalty(logp, ref, "k2"), [0.125, 0.125])
    # ref - logp = [-0.5, 0.5]: exp(-0.5) + 0.5 - 1 = 0.1065307 ; exp(0.5) - 0.5 - 1 = 0.1487213
    close(kl_penalty(logp, ref, "k3"), [0.1065307, 0.1487213])
    with pytest.raises(ValueError, match="k3"):
        kl_penalty(logp, ref, "k4")


def test_value_loss_plain_and_clipped():
    values = torch.tensor([1.0, 2.0, 3.0])
    old = torch.tensor([0.5, 2.5, 2.0])
    returns = torch.tensor([0.0, 2.0, 5.0])
    # unclipped squared errors [1, 0, 4] -> 0.5 * 5/3
    close(value_loss(values, old, returns), 0.5 * 5 / 3)
    # clip 0.2: clipped values [0.7, 2.3, 2.2] -> squared errors [0.49, 0.09, 7.84]
    # max with unclipped: [1, 0.09, 7.84] -> 0.5 * 8.93 / 3
    close(value_loss(values, old, returns, clip=0.2), 0.5 * 8.93 / 3)
