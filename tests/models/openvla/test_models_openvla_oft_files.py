"""OpenVLA-OFT's published side files: the L1 regression action head, the proprio projector, the fine-tuning
data's statistics (moojink/openvla-oft). A directory written the way OFT's fine-tuning writes it loads and acts as
the reference's ``predict_action`` computes; our own save writes the same names."""

import math
import json
import os

import pytest
import torch
from torch.nn import functional as F

from embodied_rl.models.openvla import save_published_checkpoint
from embodied_rl.models.openvla.action_head import L1RegressionActionHead
from openvla_helpers import ACTION_DIM, make_obs, make_policy, supervised_losses
from test_models_openvla_layout import recorded

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PUBLISHED_HEAD_KEYS = {f"model.{name}.{p}" for p in ("weight", "bias") for name in (
    "layer_norm1", "fc1", "mlp_resnet_blocks.0.ffn.0", "mlp_resnet_blocks.0.ffn.1", "mlp_resnet_blocks.1.ffn.0",
    "mlp_resnet_blocks.1.ffn.1", "layer_norm2", "fc2")}


def test_the_l1_head_is_oft_s_mlp_resnet_under_its_published_names():
    """``prismatic/models/action_heads.py``: ``L1RegressionActionHead(input_dim=W, hidden_dim=W, action_dim=A)``
    regroups the ``K * A`` action hidden states per action (``[B, K, A W]``) and applies LayerNorm, fc1, ReLU, two
    blocks ``x + ReLU(Linear(LayerNorm(x)))``, LayerNorm, fc2 -> ``[B, K, A]``."""
    torch.manual_seed(0)
    width, chunk = 8, 2
    head = L1RegressionActionHead(width, ACTION_DIM)
    state = head.state_dict()
    assert set(state) == PUBLISHED_HEAD_KEYS
    with torch.no_grad():
        for value in head.parameters():
            value.normal_()
    p = head.state_dict()
    hidden = torch.randn(3, chunk * ACTION_DIM, width)
    x = hidden.reshape(3, chunk, ACTION_DIM * width)
    x = F.layer_norm(x, x.shape[-1:], p["model.layer_norm1.weight"], p["model.layer_norm1.bias"])
    x = torch.relu(x @ p["model.fc1.weight"].T + p["model.fc1.bias"])
    for block in range(2):
        name = f"model.mlp_resnet_blocks.{block}.ffn."
        y = F.layer_norm(x, x.shape[-1:], p[name + "0.weight"], p[name + "0.bias"])
        x = x + torch.relu(y @ p[name + "1.weight"].T + p[name + "1.bias"])
    x = F.layer_norm(x, x.shape[-1:], p["model.layer_norm2.weight"], p["model.layer_norm2.bias"])
    expected = x @ p["model.fc2.weight"].T + p["model.fc2.bias"]
    torch.testing.assert_close(head(hidden), expected, rtol=1e-5, atol=1e-5)


def _as_published_by_oft(directory: str, step: int = 150000) -> dict:
    """Rewrites our save the way OFT's fine-tuning leaves a directory: ``<component>--<step>_checkpoint.pt`` with
    DDP's ``module.`` prefixes, ``dataset_statistics.json`` with q01/q99 for action and proprio, and none of our
    own heads (so the placeholders load as OFT's zero embeddings)."""
    for component in ("action_head", "proprio_projector"):
        path = os.path.join(directory, f"{component}--latest_checkpoint.pt")
        state = torch.load(path, weights_only=True)
        torch.save({f"module.{k}": v for k, v in state.items()},
                   os.path.join(directory, f"{component}--{step}_checkpoint.pt"))
        os.remove(path)
    os.remove(os.path.join(directory, "embodied_rl_heads.safetensors"))
    stats = {"libero_spatial": {
        "action": {"q01": [-0.5, -1.0, 0.0], "q99": [0.5, 2.0, 1.0], "mask": [True, True, False]},
        "proprio": {"q01": [-1.0, 0.0, -2.0, 0.5, -0.1], "q99": [1.0, 3.0, 2.0, 1.5, 0.1],
                    "mean": [9.0] * 5, "std": [9.0] * 5}}}
    with open(os.path.join(directory, "dataset_statistics.json"), "w") as f:
        json.dump(stats, f)
    return stats["libero_spatial"]


@torch.no_grad()
def test_a_directory_as_oft_writes_it_acts_as_predict_action(tmp_path):
    """``experiments/robot/openvla_utils.py``: the one ``action_head--*checkpoint*`` / ``proprio_projector--*``
    file is loaded with ``module.`` stripped; ``dataset_statistics.json`` replaces the config's ``norm_stats``; the
    state is normalised as ``normalize_proprio`` (BOUNDS_Q99: ``clip(2 (x - q01) / (q99 - q01 + 1e-8) - 1, -1,
    1)``); ``predict_action`` regresses the chunk with the L1 head from the shifted action hidden states and
    unnormalises it as ``_unnormalize_actions`` (``0.5 (a + 1) (q99 - q01) + q01`` where ``mask``, ``a``
    elsewhere)."""
    trained = make_policy("openvla_oft", action_head="l1_regression")
    directory = str(tmp_path / "oft")
    save_published_checkpoint(trained, directory)
    stats = _as_published_by_oft(directory)
    policy = make_policy("openvla_oft", seed=5, checkpoint=directory)  # the head is found, not asked for
    assert policy.action_head is not None and not policy.action_queries.any()
    for name, value in trained.action_head.state_dict().items():
        assert torch.equal(policy.action_head.state_dict()[name], value)
    seen = []
    policy.proprio_projector.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    recorder = recorded(policy)
    obs = make_obs(2)
    obs["state"][0, 0] = 5.0  # beyond q99: clipped
    actions, _, _, _ = policy.act(obs, deterministic=True)

    low, high = torch.tensor(stats["proprio"]["q01"]), torch.tensor(stats["proprio"]["q99"])
    proprio = (2 * (obs["state"] - low) / (high - low + 1e-8) - 1).clamp(-1, 1)
    torch.testing.assert_close(seen[0], proprio, rtol=1e-5, atol=1e-6)
    hidden = recorder.calls[0][3]
    n = 2 * ACTION_DIM
    prompt = hidden.shape[1] - n - 1
    normalized = policy.action_head(hidden[:, prompt - 1:prompt - 1 + n])
    q01, q99 = torch.tensor(stats["action"]["q01"]), torch.tensor(stats["action"]["q99"])
    mask = torch.tensor(stats["action"]["mask"])
    expected = torch.where(mask, 0.5 * (normalized + 1) * (q99 - q01 + 1e-8) + q01, normalized)
    torch.testing.assert_close(actions, expected, rtol=1e-5, atol=1e-5)


def test_a_diffusion_head_or_two_heads_are_refused_by_name(tmp_path):
    """OFT's diffusion variant (``noisy_action_projector--*``, ``noise_predictor.*`` weights) is not supported;
    ``find_checkpoint_file`` wants exactly one file per component."""
    directory = str(tmp_path / "oft")
    save_published_checkpoint(make_policy("openvla_oft", action_head="l1_regression"), directory)
    extra = os.path.join(directory, "action_head--100_checkpoint.pt")
    torch.save({}, extra)
    with pytest.raises(ValueError, match="several action_head files"):
        make_policy("openvla_oft", checkpoint=directory)
    os.remove(extra)
    torch.save({}, os.path.join(directory, "noisy_action_projector--latest_checkpoint.pt"))
    with pytest.raises(ValueError, match="diffusion action head"):
        make_policy("openvla_oft", checkpoint=directory)
    with pytest.raises(ValueError, match="action_head='gaussian'"):
        make_policy("openvla_oft", action_head="gaussian")
    with pytest.raises(ValueError, match="action_head='l1_regression'"):
        make_policy("openvla", action_head="l1_regression")


def test_our_save_writes_oft_s_file_names_and_loads_back_to_the_same_policy(tmp_path):
    """``vla-scripts/finetune.py`` (``save_training_checkpoint``): ``proprio_projector--latest_checkpoint.pt``,
    ``action_head--latest_checkpoint.pt`` (the heads' state dicts), ``dataset_statistics.json``."""
    policy = make_policy("openvla_oft", action_head="l1_regression", init_log_std=-1.0)
    policy.set_action_statistics(torch.rand(50, 2, 3) * 4 - 2)
    policy.set_observation_normalization({"state": torch.randn(50, 5) * 3})
    with torch.no_grad():
        policy.action_log_std.add_(torch.tensor([0.1, -0.2, 0.3]))
    directory = str(tmp_path / "ours")
    save_published_checkpoint(policy, directory)
    names = set(os.listdir(directory))
    assert {"action_head--latest_checkpoint.pt", "proprio_projector--latest_checkpoint.pt",
            "dataset_statistics.json"} <= names
    assert set(torch.load(os.path.join(directory, "action_head--latest_checkpoint.pt"))) == PUBLISHED_HEAD_KEYS
    # prismatic/models/projectors.py: ProprioProjector's fc1 (D -> W) and fc2 (W -> W)
    proprio = torch.load(os.path.join(directory, "proprio_projector--latest_checkpoint.pt"))
    assert {k: tuple(v.shape) for k, v in proprio.items()} == {
        "fc1.weight": (64, 5), "fc1.bias": (64,), "fc2.weight": (64, 64), "fc2.bias": (64,)}
    loaded = make_policy("openvla_oft", seed=9, checkpoint=directory)
    obs = make_obs(3)
    actions, logp, values, stored = policy.act(obs)
    again, again_values = loaded.evaluate({**obs, **stored}, actions)[0::2]
    torch.testing.assert_close(again, logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(again_values, values, rtol=1e-5, atol=1e-5)


def test_the_l1_policy_is_a_gaussian_around_the_regressed_chunk():
    """Our addition for RL (the reference regresses deterministically): ``N(mean, exp(action_log_std)^2)`` per
    normalised coordinate; deterministic = the mean; ``evaluate`` rescores the stored normalised sample; SFT is the
    reference's L1 loss."""
    policy = make_policy("openvla_oft", action_head="l1_regression", init_log_std=-1.0)
    obs = make_obs(4)
    mean, _ = policy._regress(obs)
    actions, logp, _, stored = policy.act(obs)
    sample = stored["stored.normalized_actions"]
    std = torch.exp(torch.tensor(-1.0))
    expected = torch.distributions.Normal(mean, std).log_prob(sample).sum(-1)
    torch.testing.assert_close(logp, expected, rtol=1e-5, atol=1e-5)
    new_logp, entropy, _ = policy.evaluate({**obs, **stored}, actions)
    torch.testing.assert_close(new_logp, logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, torch.distributions.Normal(0, std).entropy().repeat(4) * 2 * ACTION_DIM)
    deterministic = policy.act(obs, deterministic=True)[0]
    torch.testing.assert_close(deterministic, policy.action_tokenizer.unnormalize(mean.reshape(4, 2, ACTION_DIM)))
    targets = torch.rand(4, 2, ACTION_DIM, generator=torch.Generator().manual_seed(3)) * 2 - 1
    losses = supervised_losses(policy, obs, targets, 40)
    assert losses[-1] < 0.3 * losses[0]


def test_std_from_residuals_sets_the_gaussian_to_the_clones_running_squared_residuals():
    obs = make_obs(4)
    targets = torch.rand(4, 2, ACTION_DIM, generator=torch.Generator().manual_seed(5)) * 2 - 1
    fixed = make_policy("openvla_oft", action_head="l1_regression", init_log_std=-1.0)
    fixed.supervised_loss(obs, targets)
    assert torch.equal(fixed.action_log_std.detach(), torch.full((ACTION_DIM,), -1.0))  # off: left as it was
    policy = make_policy("openvla_oft", action_head="l1_regression", init_log_std=-1.0, std_from_residuals=True)

    def squared_residuals():
        with torch.no_grad():
            mean = policy._regress(obs)[0].reshape(4, 2, ACTION_DIM)
            normalized = policy.action_tokenizer.normalize(targets).reshape(4, 2, ACTION_DIM)
        return (mean - normalized).pow(2).mean((0, 1))

    first = squared_residuals()
    policy.supervised_loss(obs, targets)  # the first batch: the running mean is its residuals
    torch.testing.assert_close(policy.action_log_std.detach(), 0.5 * torch.log(first))
    with torch.no_grad():
        policy.action_head.model.fc1.bias.add_(0.3)  # the clone moves: new residuals
    second = squared_residuals()
    policy.supervised_loss(obs, targets)
    torch.testing.assert_close(policy.action_log_std.detach(), 0.5 * torch.log(0.99 * first + 0.01 * second))


def test_min_std_floors_the_sampled_gaussian_and_its_log_probs_but_not_wider_dimensions():
    obs = make_obs(4)
    policy = make_policy("openvla_oft", action_head="l1_regression", init_log_std=-1.0, min_std=0.05)
    with torch.no_grad():
        policy.action_log_std[0] = math.log(0.001)  # a dimension the demonstrations never vary
    mean = policy._regress(obs)[0]
    _, logp, _, stored = policy.act(obs)
    std = torch.tensor([0.05] + [math.exp(-1.0)] * (ACTION_DIM - 1)).repeat(2)
    expected = torch.distributions.Normal(mean, std).log_prob(stored["stored.normalized_actions"]).sum(-1)
    torch.testing.assert_close(logp, expected)
    spread = (stored["stored.normalized_actions"] - mean).reshape(4, 2, ACTION_DIM)[..., 0]
    assert spread.abs().max() > 0.005  # the floored dimension is sampled at 0.05, not at 0.001
    with pytest.raises(ValueError, match="min_std=0"):
        make_policy("openvla_oft", action_head="l1_regression", min_std=0)


def test_std_scale_narrows_the_sampled_gaussian_and_its_log_probs_before_the_min_std_floor():
    obs = make_obs(4)
    policy = make_policy("openvla_oft", action_head="l1_regression", init_log_std=-1.0, min_std=0.05, std_scale=0.25)
    with torch.no_grad():
        policy.action_log_std[0] = math.log(0.1)  # 0.025 after the scale: the floor lifts it to 0.05
    mean = policy._regress(obs)[0]
    _, logp, _, stored = policy.act(obs)
    std = torch.tensor([0.05] + [0.25 * math.exp(-1.0)] * (ACTION_DIM - 1)).repeat(2)
    expected = torch.distributions.Normal(mean, std).log_prob(stored["stored.normalized_actions"]).sum(-1)
    torch.testing.assert_close(logp, expected)
    deviations = (stored["stored.normalized_actions"] - mean).reshape(4, 2, ACTION_DIM)[..., 1:]
    assert deviations.abs().max() < 5 * 0.25 * math.exp(-1.0)  # unscaled (std 0.37), 24 draws pass this 0.3% of times
    fitted = torch.full((ACTION_DIM - 1,), -1.0)  # the parameter keeps the fitted std; the scale applies on use
    torch.testing.assert_close(policy.action_log_std[1:].detach(), fitted)
    with pytest.raises(ValueError, match="std_scale=0"):
        make_policy("openvla_oft", action_head="l1_regression", std_scale=0)


@pytest.mark.parametrize("option", [{"std_scale": 0.5}, {"min_std": 0.05}, {"std_from_residuals": True},
                                    {"train_action_head_only": True}])
def test_l1_head_options_are_refused_for_action_tokens(option):
    with pytest.raises(ValueError, match=f"{next(iter(option))} is not allowed with action tokens"):
        make_policy("openvla_oft", action_head="tokens", **option)
