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



def test_chunked_mlp_acts_in_chunks_and_training_log_probs_match_rollout_log_probs():
    policy = build_policy("mlp", obs_dim=6, action_dim=2, hidden_sizes=[8], action_chunk=3, obs_indices=[0, 2, 5])
    obs = torch.randn(4, 6)
    actions, logp, _ = policy.act(obs)
    assert actions.shape == (4, 3, 2)
    new_logp, _, _ = policy.evaluate(obs, actions)
    torch.testing.assert_close(new_logp, logp, atol=1e-5, rtol=0)
    # Only the chosen features reach the networks.
    changed = obs.clone()
    changed[:, [1, 3, 4]] += 100.0
    torch.testing.assert_close(policy.act(changed, deterministic=True)[0], policy.act(obs, deterministic=True)[0])


def test_supervised_loss_falls_and_normalization_travels_in_the_state_dict():
    torch.manual_seed(0)
    policy = build_policy("mlp", obs_dim=3, action_dim=1, hidden_sizes=[32], action_chunk=2)
    obs = torch.randn(256, 3) * 50 + 10  # far from unit scale: normalisation matters
    targets = torch.stack([torch.tanh(obs[:, :1] / 50), -torch.tanh(obs[:, 1:2] / 50)], dim=1)  # [256, 2, 1]
    policy.set_observation_normalization(obs.numpy())
    assert torch.allclose(policy.obs_mean, obs.mean(0)) and "obs_std" in policy.state_dict()
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    first = policy.supervised_loss(obs, targets).item()
    for _ in range(200):
        loss = policy.supervised_loss(obs, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < first / 10
