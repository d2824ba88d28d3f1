"""Published OpenVLA layout: save, load back, identical outputs; key names and config fields as published."""

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from openvla_helpers import make_obs, make_policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")
from embodied_rl.models.openvla import load_published_checkpoint, save_published_checkpoint


def _published_keys(directory):
    with open(os.path.join(directory, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    keys = {}
    for filename in set(weight_map.values()):
        keys.update(load_file(os.path.join(directory, filename)))
    return weight_map, keys


@pytest.mark.parametrize("name, fused, lora", [("openvla", False, 0), ("openvla_oft", True, 0),
                                               ("openvla_oft", False, 4)])
def test_round_trip_gives_the_same_outputs(tmp_path, name, fused, lora):
    policy = make_policy(name, fused_vision=fused, lora_rank=lora)
    policy.set_action_statistics(torch.rand(50, 2, 3) * 4 - 2)
    policy.set_observation_normalization({"state": torch.randn(50, 5) * 3})
    if lora:  # non-zero adapters, so merging them into the base weights is checked
        with torch.no_grad():
            for n, p in policy.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.05)
    directory = str(tmp_path / "ckpt")
    save_published_checkpoint(policy, directory, max_shard_bytes=200_000)  # several shards
    save_published_checkpoint(policy, directory, max_shard_bytes=200_000)  # replaces it
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p or ".old-" in p]
    loaded = make_policy(name, seed=7, checkpoint=directory)
    obs = make_obs(3)
    actions, logp, values, stored = policy.act(obs, deterministic=True)
    again = loaded.act(obs, deterministic=True)
    assert torch.equal(stored["stored.action_tokens"], again[3]["stored.action_tokens"])
    assert torch.allclose(actions, again[0], atol=1e-6)
    assert (again[1] - logp).abs().max() < 1e-4 and (again[2] - values).abs().max() < 1e-4
    full = {**obs, **stored}
    assert (loaded.evaluate(full, actions)[0] - policy.evaluate(full, actions)[0]).abs().max() < 1e-4
    # and a differently seeded fresh policy does differ (the comparison can fail)
    assert (make_policy(name, seed=7, fused_vision=fused).evaluate(full, actions)[0] - logp).abs().max() > 1e-3


def test_published_names_and_config_fields(tmp_path):
    policy = make_policy("openvla_oft", fused_vision=True)
    directory = str(tmp_path / "ckpt")
    save_published_checkpoint(policy, directory, max_shard_bytes=300_000)
    weight_map, weights = _published_keys(directory)
    assert len(set(weight_map.values())) > 1
    for key in ["vision_backbone.featurizer.blocks.0.attn.qkv.weight",  # DINOv2 (Prismatic's first featurizer)
                "vision_backbone.featurizer.blocks.1.ls1.scale_factor", "vision_backbone.featurizer.reg_token",
                "vision_backbone.featurizer.pos_embed", "vision_backbone.fused_featurizer.patch_embed.proj.weight",
                "vision_backbone.fused_featurizer.blocks.1.mlp.fc2.bias", "vision_backbone.fused_featurizer.norm.weight",
                "projector.fc1.weight", "projector.fc3.weight", "language_model.model.layers.1.self_attn.q_proj.weight",
                "language_model.model.embed_tokens.weight", "language_model.lm_head.weight"]:
        assert key in weights, key
    width = policy.config.vision.dino_width
    assert weights["vision_backbone.featurizer.blocks.0.attn.qkv.weight"].shape == (3 * width, width)
    assert weights["vision_backbone.featurizer.pos_embed"].shape == (1, policy.config.vision.patches, width)
    assert not [k for k in weights if "lora" in k or "critic" in k]
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    assert config["model_type"] == "openvla" and config["use_fused_vision_backbone"] is True
    assert config["vision_backbone_id"] == "dinosiglip-vit-so-224px" and config["n_action_bins"] == 256
    assert config["text_config"]["hidden_size"] == policy.config.language.width
    assert set(config["norm_stats"]["embodied_rl"]["action"]) >= {"q01", "q99", "mask"}
    assert os.path.exists(os.path.join(directory, "proprio_projector--latest_checkpoint.pt"))


def test_loading_maps_timm_qkv_onto_q_k_v(tmp_path):
    """A hand-made change to the published fused qkv tensor lands in the k projection only."""
    policy = make_policy("openvla")
    directory = str(tmp_path / "ckpt")
    save_published_checkpoint(policy, directory)
    weight_map, weights = _published_keys(directory)
    key = "vision_backbone.featurizer.blocks.0.attn.qkv.weight"
    width = policy.config.vision.siglip_width
    weights[key][width:2 * width] += 1.0
    from safetensors.torch import save_file

    for filename in set(weight_map.values()):
        save_file({k: v for k, v in weights.items() if weight_map[k] == filename}, os.path.join(directory, filename))
    loaded = load_published_checkpoint(directory).weights
    attention = "vision_backbone.featurizer.encoder.layers.0.self_attn."
    own = policy.state_dict()
    assert torch.equal(loaded[attention + "q_proj.weight"], own[attention + "q_proj.weight"])
    assert torch.equal(loaded[attention + "k_proj.weight"], own[attention + "k_proj.weight"] + 1.0)
    assert torch.equal(loaded[attention + "v_proj.weight"], own[attention + "v_proj.weight"])


def test_a_checkpoint_of_another_shape_is_refused(tmp_path):
    directory = str(tmp_path / "ckpt")
    save_published_checkpoint(make_policy("openvla_oft", action_chunk=2), directory)
    with pytest.raises(ValueError, match="action_queries"):
        make_policy("openvla_oft", action_chunk=3, checkpoint=directory)


def test_a_checkpoint_loads_into_an_uninitialised_network_one_tensor_at_a_time(tmp_path, monkeypatch):
    """Reading a checkpoint holds no tensor; building the policy from it reads each published tensor as it is
    copied in (the fused q/k/v tensor once per projection), into a network built without random initialisation,
    and every weight ends up as saved (DINOv2's unused mask token zeroed)."""
    from embodied_rl.models.openvla import checkpoint

    saved = make_policy("openvla_oft", fused_vision=True)
    directory = str(tmp_path / "ckpt")
    save_published_checkpoint(saved, directory, max_shard_bytes=200_000)
    reads = []
    original = checkpoint.PublishedWeights.__getitem__
    monkeypatch.setattr(checkpoint.PublishedWeights, "__getitem__", lambda self, key: reads.append(key) or
                        original(self, key))
    loaded = load_published_checkpoint(directory)
    assert not reads and len(loaded.weights) > 20
    init_calls = []
    monkeypatch.setattr(torch.nn.init, "normal_", lambda tensor, *a, **k: tensor.is_meta or
                        init_calls.append(tuple(tensor.shape)) or tensor)  # (meta: the reader's names and shapes)
    policy = make_policy("openvla_oft", seed=7, fused_vision=True, checkpoint=directory)
    published = set(_published_keys(directory)[1])
    assert set(reads) == published and max(reads.count(k) for k in reads) <= 3
    assert all(shape != (policy.config.language.vocab_size, policy.config.language.width) for shape in init_calls)
    own = saved.state_dict()
    for name, value in policy.state_dict().items():
        if name.endswith("mask_token"):
            assert not value.any()
        elif not name.startswith(("critic_head", "action_queries")):
            assert torch.equal(value, own[name]), name


def test_uninitialised_skips_random_initialisation_only_inside():
    from embodied_rl.models.policy import uninitialised

    inside = torch.zeros(4)
    with uninitialised():
        torch.nn.init.normal_(inside)
    assert not inside.any()
    assert torch.nn.init.normal_(torch.zeros(4)).any()
    with uninitialised(False):
        assert torch.nn.init.normal_(torch.zeros(4)).any()
