import pytest
import torch

from embodied_rl.models import POLICIES, build_policy


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_policies_are_registered_and_shapes_match_the_docstring(name):
    assert name in POLICIES
    policy = build_policy(name, obs_dim=7, action_dim=3, hidden_sizes=[16, 16])
    obs = torch.randn(5, 7)
    actions, logp, values = policy.act(obs)
    assert actions.shape == (5, 3) and logp.shape == (5,) and values.shape == (5,)
    new_logp, entropy, new_values = policy.evaluate(obs, actions)
    torch.testing.assert_close(new_logp, logp)
    torch.testing.assert_close(new_values, values)
    assert entropy.shape == (5,)


def test_deterministic_action_is_the_mean_and_log_prob_is_the_gaussian_density():
    policy = build_policy("mlp", obs_dim=2, action_dim=1, hidden_sizes=[4], init_log_std=0.0)
    obs = torch.zeros(1, 2)
    action, logp, _ = policy.act(obs, deterministic=True)
    mean = policy.actor_mean(obs)
    torch.testing.assert_close(action, mean)
    # log N(mean; mean, 1) = -0.5 * log(2 pi)
    torch.testing.assert_close(logp, torch.tensor([-0.9189385]), atol=1e-6, rtol=0)

