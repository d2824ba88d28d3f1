"""LoRA, trainable_state_dict, checkpoint round trips, and option errors of the pi0 policy."""

import os

import pytest
import torch

from embodied_rl.models.pi0 import CHAIN_KEY, Pi0Policy
from embodied_rl.models.pi0.checkpoint import SIDE_WEIGHTS, read_options
from pi0_helpers import observations, tiny_policy


def test_lora_trains_only_adapters_and_heads_and_syncs_less():
    plain = tiny_policy(chunk=2, steps=3)
    lora = tiny_policy(chunk=2, steps=3, lora_rank=4)
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert any("lora_A" in n for n in trainable) and any(".dit." in n and "lora_" in n for n in trainable)
    assert all("lora_" in n or n.startswith(("critic", "pi0.embed_action_time", "pi0.action_out_proj"))
               for n in trainable)
    assert not any("vision_tower" in n and "lora_" in n for n, _ in lora.named_parameters())
    assert set(plain.trainable_state_dict()) == set(plain.state_dict())
    small, full = lora.trainable_state_dict(), lora.state_dict()
    assert set(small) < set(full)
    assert sum(v.numel() for v in small.values()) < 0.5 * sum(v.numel() for v in full.values())
    # LoRA starts as the identity (B = 0): same outputs as the plain model built from the same seed.
    obs = observations(batch=2)
    torch.testing.assert_close(lora.act(obs, deterministic=True)[0], plain.act(obs, deterministic=True)[0])
    # A PPO-like step moves only what trainable_state_dict names; plain state_dict round trips.
    before = {k: v.clone() for k, v in full.items()}
    actions, logp, _, stored = lora.act(obs)
    optimizer = torch.optim.Adam([p for p in lora.parameters() if p.requires_grad], lr=1e-2)
    (-lora.evaluate({**obs, **stored}, actions)[0].mean()).backward()
    optimizer.step()
    changed = {k for k, v in lora.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and changed <= set(small)
    copy = tiny_policy(chunk=2, steps=3, lora_rank=4, seed=9)
    copy.load_state_dict(lora.state_dict())
    torch.testing.assert_close(copy.act(obs, deterministic=True)[0], lora.act(obs, deterministic=True)[0])


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_checkpoint_round_trip_gives_the_same_outputs(tmp_path, lora_rank):
    policy = tiny_policy(chunk=4, steps=5, lora_rank=lora_rank, action_normalization="mean_std")
    policy.set_observation_normalization({"state": torch.randn(50, 5) * 3 + 1})
    policy.set_action_statistics(torch.rand(50, 4).numpy() * 0.5)
    with torch.no_grad():  # move every weight (LoRA B included) away from its init
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    directory = str(tmp_path / "ckpt")
    policy.save_checkpoint(directory)
    policy.save_checkpoint(directory)  # replacing an existing checkpoint works
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # no temporary leftovers
    names = os.listdir(directory)
    assert "config.json" in names and "model.safetensors" in names and SIDE_WEIGHTS in names
    assert read_options(directory)["action_chunk"] == 4
    loaded = Pi0Policy(obs_dim=5, action_dim=4, hidden_sizes=(16,), obs_shapes={"rgb": [32, 32, 3]},
                       action_chunk=4, num_denoising_steps=5, checkpoint=directory, lora_rank=lora_rank,
                       action_normalization="mean_std")
    obs = observations(batch=3)
    torch.manual_seed(7)
    expected = policy.act(obs)
    torch.manual_seed(7)
    got = loaded.act(obs)
    for a, b in zip(expected[:3], got[:3]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(expected[3][CHAIN_KEY], got[3][CHAIN_KEY], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loaded.state_std, policy.state_std)
    # A freshly built policy differs: the test can tell a failed load.
    assert (tiny_policy(chunk=4, steps=5, seed=3).act(obs, deterministic=True)[0]
            - policy.act(obs, deterministic=True)[0]).abs().max() > 1e-3


@pytest.mark.parametrize("options, key, allowed", [
    ({"size": "huge"}, "size", "'tiny', 'full'"),
    ({"num_denoising_steps": 0}, "num_denoising_steps", ">= 1"),
    ({"noise_mode": "ddpm"}, "noise_mode", "'sde', 'flow_noise'"),
    ({"noise_level": 0.0}, "noise_level", "> 0"),
    ({"stochastic_steps": [7]}, "stochastic_steps", "0..4"),
    ({"dtype": "float64"}, "dtype", "'float32'"),
    ({"settings": {"image_size": 30}}, "image_size", "multiples of patch_size"),
    ({"settings": {"widht": 3}}, "widht", "allowed keys"),
])
def test_bad_options_raise_one_clear_value_error(options, key, allowed):
    options = {"num_denoising_steps": 5, **options}
    with pytest.raises(ValueError) as error:
        Pi0Policy(obs_dim=5, action_dim=4, obs_shapes={"rgb": [32, 32, 3]}, **options)
    assert key in str(error.value) and allowed in str(error.value)


def test_missing_chain_and_missing_rgb_are_errors(tmp_path):
    policy = tiny_policy(chunk=2, steps=3)
    with pytest.raises(ValueError, match="stored.chain"):
        policy.evaluate(observations(batch=2), torch.zeros(2, 2, 4))
    with pytest.raises(ValueError, match="obs_shapes"):
        Pi0Policy(obs_dim=5, action_dim=4, obs_shapes={"state": [5]})
    with pytest.raises(ValueError, match="checkpoint"):
        Pi0Policy(obs_dim=5, action_dim=4, obs_shapes={"rgb": [32, 32, 3]}, checkpoint=str(tmp_path))


def test_full_preset_has_the_published_sizes_without_building_it():
    from embodied_rl.models.pi0 import Pi0Settings

    config = Pi0Settings.full().to_transformers(chunk=50, state_dim=32, action_dim=32)
    text, vision, expert = config.vlm_config.text_config, config.vlm_config.vision_config, config.dit_config
    assert (text.hidden_size, text.num_hidden_layers, text.head_dim, text.vocab_size) == (2048, 18, 256, 257152)
    assert (vision.hidden_size, vision.num_hidden_layers, vision.image_size, vision.patch_size) == (1152, 27, 224, 14)
    assert (expert.hidden_size, expert.intermediate_size, expert.num_hidden_layers) == (1024, 4096, 18)


def test_bfloat16_weights_keep_a_float32_chain():
    policy = tiny_policy(chunk=2, steps=3, dtype="bfloat16")
    obs = observations(batch=2)
    actions, logp, _, stored = policy.act(obs)
    assert policy.pi0.action_out_proj.weight.dtype == torch.float32  # trained: float32 master weights
    assert stored[CHAIN_KEY].dtype == torch.float32 and logp.dtype == torch.float32
    assert (policy.evaluate({**obs, **stored}, actions)[0] - logp).abs().max() < 1e-3
