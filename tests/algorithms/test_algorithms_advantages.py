import pytest
import torch

from embodied_rl.algorithms.advantages import (
    dr_grpo_advantages,
    gae,
    grpo_advantages,
    kept_group_advantages,
    reinforce_plus_plus_advantages,
    rloo_advantages,
)
from embodied_rl.algorithms.registry import ADVANTAGE_ESTIMATORS
from embodied_rl.utils.registry import Registry


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(
        actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0
    )


# ---------------------------------------------------------------- registry


def test_registry_get_register_names_and_unknown_name_lists_allowed():
    reg = Registry("thing")

    @reg.register("b")
    def b():
        return "b"

    @reg.register("a")
    def a():
        return "a"

    assert reg.get("a") is a and reg.get("b") is b
    assert reg.names() == ["a", "b"]
    with pytest.raises(KeyError, match="allowed: a, b"):
        reg.get("c")
    with pytest.raises(KeyError, match="already registered"):
        reg.register("a")(lambda: None)


def test_group_estimators_are_registered_under_the_family_names_with_one_signature():
    assert ADVANTAGE_ESTIMATORS.names() == ["dr_grpo", "grpo", "reinforce_pp", "rloo"]
    scores = torch.tensor([1.0, 0.0, 3.0, 3.0])
    for name in ADVANTAGE_ESTIMATORS.names():
        assert ADVANTAGE_ESTIMATORS.get(name)(scores, 2).shape == (4,)
    assert ADVANTAGE_ESTIMATORS.get("reinforce_pp") is reinforce_plus_plus_advantages


def test_kept_group_advantages_normalise_among_the_kept_only():
    # group 0 keeps (1, 3): mean 2, std 1.414 -> -0.7071, +0.7071; the dropped member gets 0
    scores = torch.tensor([1.0, 3.0, 100.0, 5.0, 5.0, 0.0])
    keep = torch.tensor([True, True, False, True, False, False])
    adv = kept_group_advantages(scores, keep, 3)
    assert adv.tolist() == pytest.approx([-0.7071, 0.7071, 0.0, 0.0, 0.0, 0.0], abs=1e-4)


# ---------------------------------------------------------------- gae


def test_gae_hand_computed_termination_and_truncation():
    # T=3, B=2, gamma=0.9, lam=0.8 (gamma*lam = 0.72).
    # env 0: terminated after t=1.       env 1: truncated after t=0, V(final obs)=4.0
    rewards = torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
    values = torch.tensor([[0.5, 1.0], [1.0, 2.0], [1.5, 3.0]])
    dones = torch.tensor([[False, True], [True, False], [False, False]])
    truncated = torch.tensor([[False, True], [False, False], [False, False]])
    nan = float("nan")  # unread entries: must not leak
    final_values = torch.tensor([[nan, 4.0], [nan, nan], [nan, nan]])
    next_value = torch.tensor([2.0, 0.5])
    # env 0:
    #  t=2: delta = 3 + 0.9*2.0 - 1.5 = 3.3                 A = 3.3
    #  t=1: done, delta = 2 - 1.0 = 1.0                     A = 1.0
    #  t=0: delta = 1 + 0.9*1.0 - 0.5 = 1.4                 A = 1.4 + 0.72*1.0 = 2.12
    # env 1:
    #  t=2: delta = 1 + 0.9*0.5 - 3.0 = -1.55               A = -1.55
    #  t=1: delta = 1 + 0.9*3.0 - 2.0 = 1.7                 A = 1.7 + 0.72*(-1.55) = 0.584
    #  t=0: truncated: delta = 1 + 0.9*4.0 - 1.0 = 3.6      A = 3.6 (recursion cut)
    adv, ret = gae(rewards, values, dones, next_value, 0.9, 0.8, truncated, final_values)
    close(adv, [[2.12, 3.6], [1.0, 0.584], [3.3, -1.55]])
    # returns = advantages + values
    close(ret, [[2.62, 4.6], [2.0, 2.584], [4.8, 1.45]])


def test_gae_without_truncation_and_lambda_one_is_discounted_return():
    # T=3, B=1, no dones, gamma=0.5, lam=1: A_t = sum_k gamma^k r_{t+k} + gamma^{T-t} V_T - V_t
    rewards = torch.tensor([[1.0], [2.0], [4.0]])
    values = torch.tensor([[1.0], [0.0], [2.0]])
    dones = torch.zeros(3, 1)
    next_value = torch.tensor([8.0])
    # t=2: 4 + 0.5*8 - 2 = 6
    # t=1: 2 + 0.5*4 + 0.25*8 - 0 = 6
    # t=0: 1 + 0.5*2 + 0.25*4 + 0.125*8 - 1 = 3
    adv, ret = gae(rewards, values, dones, next_value, 0.5, 1.0)
    close(adv, [[3.0], [6.0], [6.0]])
    close(ret, [[4.0], [6.0], [8.0]])


def test_gae_lambda_zero_is_one_step_td():
    rewards = torch.tensor([[1.0], [2.0]])
    values = torch.tensor([[3.0], [5.0]])
    # t=1: 2 + 0.9*10 - 5 = 6 ; t=0: 1 + 0.9*5 - 3 = 2.5
    adv, _ = gae(rewards, values, torch.zeros(2, 1), torch.tensor([10.0]), 0.9, 0.0)
    close(adv, [[2.5], [6.0]])


def _naive_gae(rewards, values, dones, next_value, gamma, lam, truncated, final_values):
    T, B = len(rewards), len(rewards[0])
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            v_next = next_value[b] if t == T - 1 else values[t + 1][b]
            if dones[t][b]:
                target = rewards[t][b]
                if truncated[t][b]:
                    target += gamma * final_values[t][b]
                running = target - values[t][b]
            else:
                delta = rewards[t][b] + gamma * v_next - values[t][b]
                running = delta + gamma * lam * running
            adv[t][b] = running
    return adv


def test_gae_matches_naive_loop_on_random_inputs():
    gen = torch.Generator().manual_seed(0)
    T, B, gamma, lam = 17, 5, 0.97, 0.9
    rewards = torch.randn(T, B, generator=gen, dtype=torch.float64)
    values = torch.randn(T, B, generator=gen, dtype=torch.float64)
    next_value = torch.randn(B, generator=gen, dtype=torch.float64)
    dones = torch.rand(T, B, generator=gen) < 0.2
    truncated = dones & (torch.rand(T, B, generator=gen) < 0.5)
    final_values = torch.randn(T, B, generator=gen, dtype=torch.float64)
    assert dones.any() and truncated.any() and (dones & ~truncated).any()

    adv, ret = gae(
        rewards, values, dones.double(), next_value, gamma, lam, truncated, final_values
    )
    expected = _naive_gae(
        rewards.tolist(), values.tolist(), dones.tolist(), next_value.tolist(),
        gamma, lam, truncated.tolist(), final_values.tolist(),
    )
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(ret, adv + values)


def test_gae_bool_and_float_dones_agree():
    gen = torch.Generator().manual_seed(1)
    rewards, values = torch.randn(6, 3, generator=gen), torch.randn(6, 3, generator=gen)
    dones = torch.rand(6, 3, generator=gen) < 0.3
    nv = torch.randn(3, generator=gen)
    a_bool, _ = gae(rewards, values, dones, nv, 0.99, 0.95)
    a_float, _ = gae(rewards, values, dones.float(), nv, 0.99, 0.95)
    torch.testing.assert_close(a_bool, a_float)


def test_gae_rejects_bad_inputs():
    r = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="same"):
        gae(r, torch.zeros(3, 3), torch.zeros(3, 2), torch.zeros(2), 0.9, 0.9)
    with pytest.raises(ValueError, match="next_value"):
        gae(r, torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3), 0.9, 0.9)
    with pytest.raises(ValueError, match="together"):
        gae(r, r, r, torch.zeros(2), 0.9, 0.9, truncated=r.bool())


# ---------------------------------------------------------------- group estimators

# G = 4; group 0 = [1,0,0,1], group 1 all identical, group 2 = [0,0,0,3]
SCORES = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0, 0.0, 0.0, 0.0, 3.0])


def test_grpo_hand_computed_unbiased_std():
    # group 0: mean 0.5, deviations +-0.5, unbiased var = 4*0.25/3 = 1/3, std = 0.5773503
    #          -> +-0.5/0.5773503 = +-0.8660254 (biased std would give +-1.0)
    # group 1: identical -> 0
    # group 2: mean 0.75, deviations [-0.75]*3 + [2.25], var = (3*0.5625 + 5.0625)/3 = 2.25,
    #          std = 1.5 -> [-0.5, -0.5, -0.5, 1.5]
    adv = grpo_advantages(SCORES, 4)
    h = 0.8660254
    close(adv, [h, -h, -h, h, 0, 0, 0, 0, -0.5, -0.5, -0.5, 1.5])


def test_grpo_without_std_and_dr_grpo():
    expected = [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0, -0.75, -0.75, -0.75, 2.25]
    close(grpo_advantages(SCORES, 4, normalize_std=False), expected)
    close(dr_grpo_advantages(SCORES, 4), expected)


def test_grpo_identical_group_is_exactly_zero_and_int_scores_ok():
    adv = grpo_advantages(torch.tensor([3, 3, 3, 1, 2, 3]), 3)
    assert adv.dtype == torch.float32
    assert torch.equal(adv[:3], torch.zeros(3))
    # [1,2,3]: mean 2, unbiased std 1 -> [-1, 0, 1]
    close(adv[3:], [-1.0, 0.0, 1.0])


def test_grpo_group_size_one_gives_zero_not_nan():
    close(grpo_advantages(torch.tensor([1.0, 5.0]), 1), [0.0, 0.0])


def test_rloo_hand_computed():
    # group 0 [1,0,0,1]: 1 - mean(0,0,1)=1-1/3 ; 0 - mean(1,0,1) = -2/3
    # group 2 [0,0,0,3]: 0 - mean(0,0,3) = -1 ; 3 - mean(0,0,0) = 3
    t = 2.0 / 3.0
    close(rloo_advantages(SCORES, 4), [t, -t, -t, t, 0, 0, 0, 0, -1, -1, -1, 3])


def test_reinforce_plus_plus_hand_computed():
    # [1,2,3,6]: mean 3, deviations [-2,-1,0,3], unbiased var = 14/3, std = 2.1602469
    adv = reinforce_plus_plus_advantages(torch.tensor([1.0, 2.0, 3.0, 6.0]))
    close(adv, [-0.9258201, -0.4629100, 0.0, 1.3887301])


@pytest.mark.parametrize(
    "fn", [grpo_advantages, dr_grpo_advantages, rloo_advantages], ids=["grpo", "dr", "rloo"]
)
def test_group_estimators_reject_non_multiple(fn):
    with pytest.raises(ValueError, match="multiple of group_size"):
        fn(torch.zeros(6), 4)


def test_group_estimators_reject_bad_group_size():
    with pytest.raises(ValueError):
        grpo_advantages(torch.zeros(4), 0)
    with pytest.raises(ValueError, match="group_size >= 2"):
        rloo_advantages(torch.zeros(4), 1)
    with pytest.raises(ValueError, match="1-D"):
        grpo_advantages(torch.zeros(2, 2), 2)
