"""LoRA (peft): what trains, what syncs, outputs equal to the base model at init; option validation."""

import pytest
import torch

from openvla_helpers import make_obs, make_policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("name", ["openvla", "openvla_oft"])
def test_lora_trains_adapters_and_heads_only(name):
    base = make_policy(name, seed=0)
    lora = make_policy(name, seed=0, lora_rank=4)
    obs = make_obs(3)
    actions, logp, values, stored = base.act(obs)
    full = {**obs, **stored}
    lora_logp, _, lora_values = lora.evaluate(full, actions)
    assert (lora_logp - logp).abs().max() < 1e-5 and (lora_values - values).abs().max() < 1e-5  # B = 0 at init
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    assert any("lora_A" in n for n in trainable) and any("lora_B" in n for n in trainable)
    allowed = ("critic_head.", "projector.", "proprio_projector.", "action_queries")
    assert all("lora_" in n or n.startswith(allowed) for n in trainable), sorted(trainable)
    assert any(n.startswith("critic_head.") for n in trainable)
    frozen = {n for n, p in lora.named_parameters() if not p.requires_grad}
    assert any(n.startswith("language_model.") for n in frozen) and any(n.startswith("vision_backbone.") for n in frozen)
    small, whole = lora.trainable_state_dict(), lora.state_dict()
    assert set(small) < set(whole) and sum(v.numel() for v in small.values()) < 0.5 * sum(v.numel() for v in whole.values())
    assert "action_tokenizer.q01" in small and "state_mean" in small
    # a gradient step moves the adapters, not the frozen base
    before = {n: p.detach().clone() for n, p in lora.named_parameters()}
    loss = lora.supervised_loss(obs, actions)
    loss.backward()
    torch.optim.SGD([p for p in lora.parameters() if p.requires_grad], lr=0.1).step()
    changed = {n for n, p in lora.named_parameters() if not torch.equal(p, before[n])}
    assert changed and changed <= trainable and any("lora_B" in n for n in changed)
    # the full state dict loads back (another process's copy), and the trained-only part too
    copy = make_policy(name, seed=5, lora_rank=4)
    copy.load_state_dict(whole)
    copy.load_state_dict(lora.trainable_state_dict(), strict=False)
    assert torch.equal(copy.evaluate(full, actions)[0], lora.evaluate(full, actions)[0])


def test_without_lora_everything_trains():
    policy = make_policy("openvla")
    assert all(p.requires_grad for p in policy.parameters())
    assert set(policy.trainable_state_dict()) == set(policy.state_dict())


@pytest.mark.parametrize("key, value, allowed", [("size", "huge", "'tiny', 'full'"),
                                                 ("dtype", "float64", "'float32', 'bfloat16'"),
                                                 ("lora_rank", -1, "integer >= 0"),
                                                 ("action_chunk", 0, "integer >= 1")])
def test_bad_options_name_the_key_and_allowed_values(key, value, allowed):
    with pytest.raises(ValueError) as error:
        make_policy("openvla_oft", **{key: value})
    message = str(error.value)
    assert f"{key}={value!r}" in message and allowed in message and "\n" not in message


def test_missing_rgb_is_refused():
    from embodied_rl.models.registry import build_policy

    with pytest.raises(ValueError, match="obs_shapes"):
        build_policy("openvla", obs_dim=5, action_dim=3, obs_shapes={"state": [5]})


def test_registry_metadata():
    from embodied_rl.models.registry import observation_modes, policy_options, policy_sizes

    for name in ("openvla", "openvla_oft"):
        assert observation_modes(name) == ("rgb",) and policy_sizes(name) == ("tiny", "full")
        assert {"action_chunk", "checkpoint", "lora_rank", "dtype"} <= set(policy_options(name))


@pytest.mark.parametrize("detach", [True, False])
def test_critic_detach_keeps_the_value_loss_out_of_the_policy_trunk(detach):
    policy = make_policy("openvla_oft", critic_detach=detach)
    obs = make_obs(3)
    _, _, values = policy.evaluate({**obs, **policy.act(obs)[3]}, torch.zeros(3, 2, 3))
    (values ** 2).mean().backward()
    trunk = [p.grad for n, p in policy.named_parameters() if n.startswith(("language_model.", "projector."))]
    head = [p.grad for n, p in policy.named_parameters() if n.startswith("critic_head.")]
    assert all(g is not None and g.abs().sum() > 0 for g in head)
    moved = any(g is not None and g.abs().sum() > 0 for g in trunk)
    assert moved is not detach


def test_critic_detach_must_be_a_boolean():
    with pytest.raises(ValueError, match="critic_detach='yes' is not allowed"):
        make_policy("openvla_oft", critic_detach="yes")
