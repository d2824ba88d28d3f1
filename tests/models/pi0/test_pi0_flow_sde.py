"""Flow-SDE step against numbers worked out by hand."""

import math

import pytest
import torch

from embodied_rl.models.pi0 import flow_sde


def test_sigma_follows_the_formula_and_is_clamped_near_t_equal_one():
    # 0.5 * sqrt(0.5 / 0.5) = 0.5; at t = 1 the clamp 0.8 gives 0.5 * sqrt(0.8 / 0.2) = 1.0
    assert flow_sde.sde_sigma(0.5, 0.5, 0.8) == pytest.approx(0.5)
    assert flow_sde.sde_sigma(1.0, 0.5, 0.8) == pytest.approx(1.0)
    torch.testing.assert_close(flow_sde.sde_sigma(torch.tensor([0.5, 1.0]), 0.5, 0.8), torch.tensor([0.5, 1.0]))


def test_one_step_mean_std_and_log_density_by_hand():
    # x = 1, v = 2, t = 0.5, dt = -0.25, sigma = 0.5:
    # drift = v + sigma^2 / (2 t) * (x + (1 - t) v) = 2 + 0.25 * 2 = 2.5; mean = 1 + 2.5 * (-0.25) = 0.375
    # std = 0.5 * sqrt(0.25) = 0.25; log N(0.5; 0.375, 0.25^2) = -0.5 * 0.5^2 - log 0.25 - log sqrt(2 pi)
    x, v = torch.tensor([1.0]), torch.tensor([2.0])
    mean, std = flow_sde.sde_step_mean_std(x, v, 0.5, -0.25, 0.5)
    torch.testing.assert_close(mean, torch.tensor([0.375]))
    assert std == pytest.approx(0.25)
    logp = flow_sde.gaussian_log_prob(torch.tensor([0.5]), mean, std)
    expected = -0.125 - math.log(0.25) - 0.5 * math.log(2 * math.pi)
    torch.testing.assert_close(logp, torch.tensor([expected]))
    assert expected == pytest.approx(0.3423559, abs=1e-6)


def test_small_noise_level_tends_to_the_ode_step_and_entropy_matches_torch():
    x, v = torch.randn(3, 4), torch.randn(3, 4)
    mean, _ = flow_sde.sde_step_mean_std(x, v, 0.7, -0.1, 1e-4)
    torch.testing.assert_close(mean, flow_sde.ode_step(x, v, -0.1))
    ode_mean, std = flow_sde.flow_noise_mean_std(x, v, -0.25, torch.full((3, 4), 0.4))
    torch.testing.assert_close(ode_mean, x - 0.25 * v)
    torch.testing.assert_close(std, torch.full((3, 4), 0.2))
    normal = torch.distributions.Normal(torch.zeros(3), torch.tensor([0.1, 1.0, 3.0]))
    torch.testing.assert_close(flow_sde.gaussian_entropy(torch.tensor([0.1, 1.0, 3.0])), normal.entropy())
    value = torch.tensor([0.3, -1.0, 2.0])
    torch.testing.assert_close(flow_sde.gaussian_log_prob(value, torch.zeros(3), torch.tensor([0.1, 1.0, 3.0])),
                               normal.log_prob(value))


def test_sde_step_keeps_the_marginal_of_a_gaussian_flow():
    # Data a ~ N(0, s^2): x_t ~ N(0, t^2 + (1 - t)^2 s^2), exact velocity E[noise - a | x_t] = c(t) x with
    # c = (t - (1 - t) s^2) / var_t. Many small SDE steps from t = 0.9 must reach variance s^2 near t = 0.
    torch.manual_seed(0)
    s2 = 0.25
    var = lambda t: t ** 2 + (1 - t) ** 2 * s2
    steps, t0 = 200, 0.9
    x = torch.randn(100_000) * math.sqrt(var(t0))
    dt = -(t0 - 0.01) / steps
    for i in range(steps):
        t = t0 + i * dt
        v = (t - (1 - t) * s2) / var(t) * x
        mean, std = flow_sde.sde_step_mean_std(x, v, t, dt, flow_sde.sde_sigma(t, 0.7, 0.99))
        x = mean + std * torch.randn_like(x)
    assert x.var().item() == pytest.approx(var(0.01), rel=0.05)
