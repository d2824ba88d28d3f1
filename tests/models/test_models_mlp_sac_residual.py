"""The residual actor of ``mlp_sac``: a frozen clone plus a correction that starts at zero, loaded from an SFT
checkpoint of the plain actor; and SAC's clone KL and clone entropy target on it."""

import math

import pytest
import torch

from embodied_rl.algorithms.embodied import ALGORITHMS
from embodied_rl.algorithms.embodied.sac import SACConfig, clone_kl
from embodied_rl.models import build_policy
from embodied_rl.workers.weights import host_weights, load_host_weights

pytestmark = pytest.mark.usefixtures("one_torch_thread")
OBS, ACT, CHUNK = 5, 2, 3


def _clone_and_residual(**residual_options):
    """A plain actor cloned on random targets (an SFT checkpoint's weights) loaded into a residual actor."""
    torch.manual_seed(0)
    clone = build_policy("mlp_sac", OBS, ACT, hidden_sizes=[32, 32], action_chunk=CHUNK, init_log_std=-2.5)
    obs = torch.randn(64, OBS)
    target = 0.1 * torch.tanh(obs[:, :1]).repeat(1, CHUNK * ACT).reshape(64, CHUNK, ACT)
    optimizer = torch.optim.Adam(clone.parameters(), lr=1e-2)
    for _ in range(100):
        loss = clone.supervised_loss(obs, target)
        optimizer.zero_grad(), loss.backward(), optimizer.step()
    clone.set_observation_normalization(obs.numpy() * 2.0 + 1.0)
    residual = build_policy("mlp_sac", OBS, ACT, hidden_sizes=[32, 32], action_chunk=CHUNK, init_log_std=-2.5,
                            residual=True, **residual_options)
    load_host_weights(residual, host_weights(clone))  # what init_from does with an SFT checkpoint
    return clone, residual, obs


def test_the_residual_actor_starts_equal_to_the_clone_it_loaded():
    clone, residual, obs = _clone_and_residual()
    ours, theirs = residual.distribution(obs), clone.distribution(obs)
    assert torch.equal(ours.mean, theirs.mean) and torch.equal(ours.stddev, theirs.stddev)
    assert torch.equal(residual.act(obs, deterministic=True)[0], clone.act(obs, deterministic=True)[0])
    assert clone_kl(ours, residual.clone_distribution(obs)).abs().max().item() == 0.0
    # and it is not trivially so: a correction that moved gives another actor
    with torch.no_grad():
        residual.residual_mean.bias.fill_(0.1)
    assert not torch.allclose(residual.distribution(obs).mean, theirs.mean)


def test_the_clone_is_frozen_and_only_the_correction_and_critics_train():
    _, residual, _ = _clone_and_residual()
    trained = {name for name, p in residual.named_parameters() if p.requires_grad}
    assert trained and all(name.startswith(("residual_", "critic")) for name in trained), trained
    assert {"residual_mean.weight", "residual_log_std.bias", "actor_mean.weight"} - trained == {"actor_mean.weight"}


def test_sac_steps_move_the_correction_and_never_the_clone():
    clone, residual, obs = _clone_and_residual()
    sac = ALGORITHMS.get("sac")(SACConfig(gamma=0.0, lr=3e-3, clone_kl_weight=0.1))
    sac.bind(residual, torch.device("cpu"))
    actions = torch.rand(64, CHUNK * ACT) * 2 - 1
    batch = dict(obs=obs, actions=actions, rewards=actions.sum(-1), next_obs=obs, bootstrap=torch.ones(64))
    before = {n: p.clone() for n, p in residual.named_parameters()}
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        metrics = sac.gradient_step(batch, generator)
    assert metrics["clone_kl"] > 0
    for name, p in residual.named_parameters():
        moved = not torch.equal(p, before[name])
        assert moved == (name.startswith(("residual_", "critic_q"))), name
    torch.testing.assert_close(residual.clone_distribution(obs).mean, clone.distribution(obs).mean)


def _drift_from_clone(clone_kl_weight: float) -> float:
    """300 SAC steps whose critic prefers actions far from the clone's (reward ``sum(a)``, gamma 0): the mean
    distance of the actor's mean action from the clone's on the batch's states."""
    _, residual, obs = _clone_and_residual()
    sac = ALGORITHMS.get("sac")(SACConfig(gamma=0.0, lr=1e-3, init_alpha=1e-3, autotune_alpha=False,
                                          clone_kl_weight=clone_kl_weight))
    sac.bind(residual, torch.device("cpu"))
    actions = torch.rand(256, CHUNK * ACT) * 2 - 1
    batch = dict(obs=obs.repeat(4, 1), actions=actions, rewards=actions.sum(-1), next_obs=obs.repeat(4, 1),
                 bootstrap=torch.ones(256))
    generator = torch.Generator().manual_seed(0)
    for _ in range(300):
        sac.gradient_step(batch, generator)
    with torch.no_grad():
        return float((torch.tanh(residual.distribution(obs).mean)
                      - torch.tanh(residual.clone_distribution(obs).mean)).abs().mean())


def test_clone_kl_weight_holds_the_actor_near_the_clone_against_a_critic_that_pulls_away():
    free, held = _drift_from_clone(0.0), _drift_from_clone(1.0)
    assert free > 0.3, free
    assert held < 0.05, held


def test_clone_kl_by_hand():
    p = torch.distributions.Normal(torch.tensor([[0.3, 0.0]]), torch.tensor([[0.1, 0.2]]))
    q = torch.distributions.Normal(torch.tensor([[0.0, 0.0]]), torch.tensor([[0.1, 0.1]]))
    # dim 1: 0.3^2 / (2 * 0.1^2) = 4.5; dim 2: ln(0.1 / 0.2) + 0.2^2 / (2 * 0.1^2) - 1/2
    expected = 4.5 + (math.log(0.5) + 0.04 / 0.02 - 0.5)
    assert clone_kl(p, q).item() == pytest.approx(expected)


def test_clone_entropy_target_is_measured_on_the_first_actor_batch_and_kept_in_the_state():
    _, residual, obs = _clone_and_residual()
    sac = ALGORITHMS.get("sac")(SACConfig(clone_entropy_target=True))
    sac.bind(residual, torch.device("cpu"))
    assert sac.target_entropy == -float(CHUNK * ACT)  # SAC's rule until the first actor step
    batch = dict(obs=obs, actions=torch.zeros(64, CHUNK * ACT), rewards=torch.zeros(64), next_obs=obs,
                 bootstrap=torch.ones(64))
    sac.gradient_step(batch, torch.Generator().manual_seed(0))
    # sigma = e^-2.5 in 6 dims: the Gaussian's entropy 6 (0.5 ln(2 pi e) - 2.5) = -6.49 nats, and tanh near 0
    # takes a little more (its log-Jacobian of the clone's small moves)
    gaussian = CHUNK * ACT * (0.5 * math.log(2 * math.pi * math.e) - 2.5)
    assert sac.target_entropy == pytest.approx(gaussian, abs=0.3)
    restored = ALGORITHMS.get("sac")(SACConfig(clone_entropy_target=True))
    restored.bind(residual, torch.device("cpu"))
    restored.load_state_dict(sac.state_dict())
    assert restored.target_entropy == sac.target_entropy


def test_clone_terms_need_the_residual_actor():
    plain = build_policy("mlp_sac", OBS, ACT, hidden_sizes=[8])
    with pytest.raises(ValueError, match="policy.options.residual=true"):
        ALGORITHMS.get("sac")(SACConfig(clone_kl_weight=1.0)).bind(plain, torch.device("cpu"))
    assert ("clone_kl_weight", -1.0, ">= 0") in list(SACConfig(clone_kl_weight=-1.0).problems())
