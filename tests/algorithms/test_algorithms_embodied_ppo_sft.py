"""PPO and SFT specifics: learning-rate schedules (SFT cosine, PPO anneal), critic warm-up, the critic's own learning rate."""

import pytest

from embodied_rl.algorithms.embodied.sft import SFT, SFTConfig


def test_cosine_schedule_starts_at_lr_halves_midway_and_ends_at_zero():
    sft = SFT(SFTConfig(lr=1e-3, gradient_steps=100))
    assert sft.learning_rate(0.0) == pytest.approx(1e-3)
    assert sft.learning_rate(0.5) == pytest.approx(0.5e-3)
    assert sft.learning_rate(1.0) == pytest.approx(0.0, abs=1e-12)
    assert SFT(SFTConfig(lr=1e-3, cosine_decay=False)).learning_rate(0.99) == 1e-3


def test_ppo_anneals_linearly_when_asked():
    from embodied_rl.algorithms.embodied.ppo import PPO, PPOConfig

    assert PPO(PPOConfig(lr=2e-4, anneal_lr=True)).learning_rate(0.25) == pytest.approx(1.5e-4)
    assert PPO(PPOConfig(lr=2e-4)).learning_rate(0.25) == 2e-4


def test_ppo_critic_warmup_trains_only_the_value_for_its_updates():
    import torch

    from embodied_rl.algorithms.embodied.ppo import PPO, PPOConfig

    ppo = PPO(PPOConfig(critic_warmup_updates=1, vf_coef=0.5, normalize_advantages=False))
    logp = torch.zeros(2, requires_grad=True)
    values = torch.tensor([1.0, 3.0], requires_grad=True)
    outputs = dict(logp=logp, entropy=torch.ones(2), values=values)
    minibatch = dict(advantages=torch.tensor([1.0, -1.0]), old_logp=torch.zeros(2), old_values=torch.zeros(2),
                     returns=torch.zeros(2))
    ppo.updates = 1  # within the warm-up: 0.5 * value loss only, no gradient to the policy's log-probs
    loss, _ = ppo.loss(outputs, minibatch)
    loss.backward()
    assert loss.item() == pytest.approx(0.5 * 0.5 * (1.0 + 9.0) / 2)
    assert logp.grad is None
    ppo.updates = 2
    loss, _ = ppo.loss(outputs, minibatch)
    assert loss.item() == pytest.approx(0.5 * 0.5 * 5.0 - 0.0)  # policy term: -(1 * 1 + 1 * -1) / 2 = 0


def test_the_critic_gets_its_own_learning_rate_group():
    from embodied_rl.models import build_policy
    from embodied_rl.workers.optimizer_groups import parameter_groups

    policy = build_policy("mlp", obs_dim=3, action_dim=2, hidden_sizes=[4])
    actor_group, critic_group = parameter_groups(policy, critic_lr_scale=30.0)
    assert critic_group["lr_scale"] == 30.0 and actor_group["lr_scale"] == 1.0
    assert {id(p) for p in critic_group["params"]} == {id(p) for p in policy.critic.parameters()}


def test_ppo_token_level_ratios_use_the_stored_token_log_probs():
    import torch

    from embodied_rl.algorithms.embodied.ppo import PPO, PPOConfig

    old = torch.tensor([[-1.0, -1.0], [-2.0, -2.0]])
    new = old + torch.log(torch.tensor([[1.5, 1.0], [1.0, 0.5]]))
    minibatch = dict(obs={"stored.token_logp": old}, old_logp=old.sum(-1), advantages=torch.tensor([1.0, -1.0]),
                     old_values=torch.zeros(2), returns=torch.zeros(2))
    outputs = dict(logp=new.sum(-1), token_logp=new, entropy=torch.zeros(2), values=torch.zeros(2))
    config = PPOConfig(ratio_level="token", clip_coef=0.2, normalize_advantages=False, vf_coef=0.0)
    ppo = PPO(config)
    ppo.updates = 1  # one batch prepared: past the (empty) critic warm-up
    loss, metrics = ppo.loss(outputs, minibatch)
    # per token: -1.2, -1, 1, 0.8 -> mean -0.1; per decision it would be (-1.2 + 0.8) / 2 = -0.2
    assert loss.item() == pytest.approx(-0.1)
    assert metrics["clip_fraction"] == pytest.approx(0.5)
