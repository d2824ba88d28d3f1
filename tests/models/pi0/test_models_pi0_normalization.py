"""Pi0's published normalisation statistics: read from the checkpoint directory and applied to the state the model
sees and the actions it produces, as the reference processors do."""

import json
import os

import pytest
import torch

from pi0_helpers import observations, tiny_policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STATE_MEAN, STATE_STD = [0.5, -1.0, 2.0, 0.0, 3.0], [2.0, 0.5, 1.0, 4.0, 0.25]
ACTIONS_MEAN, ACTIONS_STD = [0.1, -0.2, 0.3, 1.0], [0.5, 2.0, 0.1, 3.0]
SIDE_FILES = ("embodied_rl_pi0.safetensors", "embodied_rl_pi0.json")


@pytest.fixture(scope="module")
def bare_checkpoint(tmp_path_factory):
    """A tiny Pi0 in transformers' layout with neither our side files nor statistics (a plain PI0 directory)."""
    directory = str(tmp_path_factory.mktemp("pi0") / "bare")
    tiny_policy().save_checkpoint(directory)
    for name in (*SIDE_FILES, "processor_config.json"):
        os.remove(os.path.join(directory, name))
    return directory


def _copy(source: str, target: str) -> str:
    import shutil

    shutil.copytree(source, target)
    return target


@torch.no_grad()
def _check_applied(directory: str, bare: str, eps: float) -> None:
    """The policy of ``directory`` (with statistics) against the bare one fed the normalised state by hand:
    the model sees ``(x - mean) / (std + eps)`` and its actions come out as ``a (std + eps) + mean``."""
    policy, plain = tiny_policy(checkpoint=directory), tiny_policy(checkpoint=bare)
    obs = observations(batch=3)
    state = (obs["state"] - torch.tensor(STATE_MEAN)) / (torch.tensor(STATE_STD) + eps)
    torch.testing.assert_close(policy._state(obs, 3)[:, :5], state)
    actions = policy.act(obs, deterministic=True)[0]
    reference = plain.act({**obs, "state": state}, deterministic=True)[0]
    expected = reference * (torch.tensor(ACTIONS_STD) + eps) + torch.tensor(ACTIONS_MEAN)
    torch.testing.assert_close(actions, expected, rtol=1e-5, atol=1e-5)


def test_transformers_processor_statistics_normalise_state_and_actions(bare_checkpoint, tmp_path):
    """transformers ``models/pi0/processing_pi0.py`` (``PI0Processor``): ``processor_config.json`` holds
    ``state_mean`` / ``state_std`` / ``actions_mean`` / ``actions_std``; ``normalize`` gives the model
    ``(x - mean) / (std + 1e-8)`` for the state and the action targets, so its actions are unnormalised by the
    inverse."""
    directory = _copy(bare_checkpoint, str(tmp_path / "processor"))
    with open(os.path.join(directory, "processor_config.json"), "w") as f:
        json.dump({"processor_class": "PI0Processor", "state_mean": STATE_MEAN, "state_std": STATE_STD,
                   "actions_mean": ACTIONS_MEAN, "actions_std": ACTIONS_STD, "max_state_dim": 5}, f)
    _check_applied(directory, bare_checkpoint, 1e-8)


def test_openpi_norm_stats_normalise_state_and_actions(bare_checkpoint, tmp_path):
    """openpi ``src/openpi/transforms.py`` (``Normalize`` / ``Unnormalize``, z-score for Pi0) with
    ``assets/<asset_id>/norm_stats.json`` (``src/openpi/shared/normalize.py``): ``(x - mean[:D]) / (std[:D] +
    1e-6)``, actions ``a (std + 1e-6) + mean``; statistics wider than the data are cut to its width."""
    directory = _copy(bare_checkpoint, str(tmp_path / "openpi"))
    os.makedirs(os.path.join(directory, "assets", "libero"))
    stats = {"state": {"mean": STATE_MEAN + [7.0] * 3, "std": STATE_STD + [7.0] * 3, "q01": [0.0] * 8,
                       "q99": [1.0] * 8},
             "actions": {"mean": ACTIONS_MEAN + [7.0], "std": ACTIONS_STD + [7.0], "q01": [0.0] * 5, "q99": [1.0] * 5}}
    with open(os.path.join(directory, "assets", "libero", "norm_stats.json"), "w") as f:
        json.dump({"norm_stats": stats}, f)
    _check_applied(directory, bare_checkpoint, 1e-6)
    os.makedirs(os.path.join(directory, "assets", "droid"))
    with open(os.path.join(directory, "assets", "droid", "norm_stats.json"), "w") as f:
        json.dump({"norm_stats": stats}, f)
    with pytest.raises(ValueError, match="several norm_stats.json"):
        tiny_policy(checkpoint=directory)


def test_statistics_narrower_than_the_env_are_refused(bare_checkpoint, tmp_path):
    directory = _copy(bare_checkpoint, str(tmp_path / "narrow"))
    with open(os.path.join(directory, "processor_config.json"), "w") as f:
        json.dump({"state_mean": STATE_MEAN[:3], "state_std": STATE_STD[:3]}, f)
    with pytest.raises(ValueError, match="state statistics have 3 dims, the env's state 5"):
        tiny_policy(checkpoint=directory)


@torch.no_grad()
def test_our_save_writes_the_statistics_as_the_processor_does(tmp_path):
    """The round trip through the published form alone (our side file removed) keeps the policy's statistics."""
    policy = tiny_policy(action_normalization="mean_std")
    policy.set_observation_normalization({"state": torch.randn(64, 5) * 3 + 1})
    policy.set_action_statistics(torch.randn(64, 4, 4) * 2 - 1)
    directory = str(tmp_path / "ours")
    policy.save_checkpoint(directory)
    with open(os.path.join(directory, "processor_config.json")) as f:
        saved = json.load(f)
    torch.testing.assert_close(torch.tensor(saved["state_mean"], dtype=torch.float32), policy.state_mean)
    for name in SIDE_FILES:
        os.remove(os.path.join(directory, name))
    loaded = tiny_policy(checkpoint=directory)
    for name in ("state_mean", "state_std", "action_offset", "action_scale"):
        torch.testing.assert_close(getattr(loaded, name), getattr(policy, name))
    obs = observations(batch=2)
    torch.testing.assert_close(loaded.act(obs, deterministic=True)[0], policy.act(obs, deterministic=True)[0],
                               rtol=1e-5, atol=1e-5)
