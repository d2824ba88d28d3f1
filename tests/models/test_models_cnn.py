"""The cnn policy: camera image + proprioceptive state (dict observations), Gaussian actions (or chunks), a critic."""

import numpy as np
import pytest
import torch

from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.models import POLICIES, build_policy
from embodied_rl.models.registry import observation_modes, policy_options
from embodied_rl.runners.setup import observation_spec

SHAPES = {"rgb": [40, 40, 3], "state": [5], "instruction": []}  # tiny: 40 px is just above the 36 px minimum


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _policy(**options):
    return build_policy("cnn", obs_dim=5, action_dim=2, hidden_sizes=[16], obs_shapes=SHAPES,
                        conv_channels=[4, 8, 8], image_features=16, state_features=8, **options)


def _obs(batch: int, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {"rgb": torch.randint(0, 256, (batch, 40, 40, 3), dtype=torch.uint8, generator=generator),
            "state": torch.randn(batch, 5, generator=generator),
            "instruction": np.array(["push the blue cube onto the red and white target"] * batch)}


def _rows(obs: dict, index) -> dict:
    return {k: v[index] for k, v in obs.items()}


@pytest.mark.parametrize("chunk", [1, 4])
def test_shapes_match_the_docstring(chunk):
    policy = _policy(action_chunk=chunk)
    obs = _obs(6)
    actions, logp, values = policy.act(obs)
    assert actions.shape == ((6, chunk, 2) if chunk > 1 else (6, 2))
    assert logp.shape == values.shape == (6,)
    assert policy.features(obs).shape == (6, 16 + 8)
    new_logp, entropy, new_values = policy.evaluate(obs, actions)
    assert new_logp.shape == entropy.shape == new_values.shape == (6,)
    assert policy.supervised_loss(obs, actions).shape == ()


@pytest.mark.parametrize("chunk", [1, 4])
def test_training_log_probs_match_rollout_log_probs_for_the_same_actions(chunk):
    """The rollout worker acts on one batch; the actor re-evaluates the stored actions in shuffled minibatches."""
    torch.manual_seed(0)
    policy = _policy(action_chunk=chunk)
    obs = _obs(8)
    actions, logp, values = policy.act(obs)
    order = torch.randperm(8)
    for part in (order[:3], order[3:]):
        new_logp, _, new_values = policy.evaluate(_rows(obs, part), actions[part])
        assert (new_logp - logp[part]).abs().max() < 1e-5
        assert (new_values - values[part]).abs().max() < 1e-5


def test_image_and_state_both_reach_the_actions_and_the_instruction_is_ignored():
    policy = _policy()
    with torch.no_grad():  # an initial actor mean is ~0.01 of its features: scale it up to see differences
        policy.actor_mean[-1].weight.mul_(100)
    obs = _obs(4)
    mean = policy.act(obs, deterministic=True)[0]
    brighter = dict(obs, rgb=(obs["rgb"].int() + 60).clamp(max=255).to(torch.uint8))
    moved = dict(obs, state=obs["state"] + 1.0)
    reworded = dict(obs, instruction=np.array(["do something else entirely"] * 4))
    assert not torch.allclose(policy.act(brighter, deterministic=True)[0], mean)
    assert not torch.allclose(policy.act(moved, deterministic=True)[0], mean)
    torch.testing.assert_close(policy.act(reworded, deterministic=True)[0], mean)


@pytest.mark.parametrize("chunk", [1, 3])
def test_supervised_loss_falls_on_a_fixed_batch(chunk):
    torch.manual_seed(0)
    policy = _policy(action_chunk=chunk)
    obs = _obs(16)
    obs["state"] = obs["state"] * 40 + 7  # far from unit scale: normalisation matters
    brightness = obs["rgb"].float().mean(dim=(1, 2, 3)) / 255  # a target that depends on the image ...
    first_state = torch.tanh(obs["state"][:, 0] / 40)  # ... and one that depends on the state
    target = torch.stack([brightness * 4 - 2, first_state], dim=-1)  # [16, 2]
    target = target[:, None].expand(16, chunk, 2) if chunk > 1 else target
    policy.set_observation_normalization({k: v for k, v in obs.items() if k != "instruction"})
    torch.testing.assert_close(policy.state_mean, obs["state"].mean(0))
    assert "state_std" in policy.state_dict()
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    first = policy.supervised_loss(obs, target).item()
    for _ in range(40):
        loss = policy.supervised_loss(obs, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < first / 10


def test_observation_spec_carries_the_shapes_of_dict_observations_and_keeps_the_state_spec():
    assert observation_spec((35,)) == {"obs_dim": 35}
    spec = observation_spec({"rgb": (64, 64, 3), "state": (25,), "instruction": ()})
    assert spec == {"obs_dim": 25, "obs_shapes": {"rgb": [64, 64, 3], "state": [25], "instruction": []}}
    # Shapes are given by the runner, not a user option; the state policies keep their signatures.
    assert "obs_shapes" not in policy_options("cnn") and "action_chunk" in policy_options("cnn")
    assert observation_modes("cnn") == ("rgb",) and observation_modes("mlp") == ("state",)


def test_images_too_small_or_missing_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="at least 36x36"):
        build_policy("cnn", obs_dim=5, action_dim=2, obs_shapes={"rgb": [32, 32, 3], "state": [5]})
    with pytest.raises(ValueError, match="needs obs_shapes with 'rgb'"):
        build_policy("cnn", obs_dim=5, action_dim=2)


def test_config_validation_takes_rgb_with_the_cnn_and_refuses_it_with_the_mlp():
    assert "cnn" in POLICIES
    config = load_train_config("maniskill_pushcube", None, ["env.obs_mode=rgb", "policy.name=cnn"])
    assert config.policy.name == "cnn"
    with pytest.raises(ConfigError, match=r"env.obs_mode='rgb' needs a policy that takes it \(cnn, openvla, openvla_oft, pi0\); "
                                          r"policy.name='mlp' takes obs_mode=state"):
        load_train_config("maniskill_pushcube", None, ["env.obs_mode=rgb"])
