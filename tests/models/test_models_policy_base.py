"""The policy base class and the Gaussian actor-critic head the MLP, CNN and transformer policies share; a policy
needs none of the MLP's options."""

import pytest
import torch

from embodied_rl.models import POLICIES, build_policy
from embodied_rl.models.policy import GaussianActorCritic, Policy
from embodied_rl.models.registry import policy_options


def test_the_state_and_camera_policies_share_one_gaussian_head():
    for name in ("mlp", "cnn", "transformer"):
        assert issubclass(POLICIES.get(name), GaussianActorCritic), name
    for name in POLICIES.names():
        assert issubclass(POLICIES.get(name), Policy), name


@pytest.mark.parametrize("name, chunk", [("mlp", 1), ("mlp", 3), ("transformer", 1)])
def test_act_and_evaluate_agree_on_the_log_probs_of_the_sampled_actions(name, chunk):
    torch.manual_seed(0)
    options = {"action_chunk": chunk} if chunk > 1 else {}
    policy = build_policy(name, 8, 2, hidden_sizes=[16], init_log_std=-0.5, **options)
    obs = torch.randn(5, 8)
    actions, logp, values = policy.act(obs)
    assert actions.shape == ((5, chunk, 2) if chunk > 1 else (5, 2))
    again, entropy, values_again = policy.evaluate(obs, actions)
    assert torch.allclose(logp, again, atol=1e-5) and torch.allclose(values, values_again)
    assert entropy.shape == (5,) and policy.supervised_loss(obs, actions).item() > 0


def test_a_policy_without_the_mlp_options_is_built_without_them():
    @POLICIES.register("test_minimal_policy")
    class Minimal(Policy):
        def __init__(self, obs_dim: int, action_dim: int, gain: float = 1.0):
            super().__init__()
            self.linear = torch.nn.Linear(obs_dim, action_dim)
            self.gain = gain

    try:
        policy = build_policy("test_minimal_policy", 4, 2, hidden_sizes=[8], init_log_std=-1.0, obs_shapes=None,
                              size="tiny", gain=2.0)
        assert policy.gain == 2.0 and policy.observation_modes == ("state",)
        assert policy_options("test_minimal_policy") == ["gain"]
        with pytest.raises(TypeError):  # options of its own are still checked by its constructor
            build_policy("test_minimal_policy", 4, 2, width=3)
    finally:
        POLICIES._entries.pop("test_minimal_policy")
