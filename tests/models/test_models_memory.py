"""The memory model behind ``embodied-rl plan``: parameter sizes from a policy built on the meta device are the real
policy's, and the activation estimate of each architecture is within 25% of the bytes autograd actually keeps for
the backward pass (measured here on CPU, tiny and small sizes; the OpenVLA policies within 10%)."""

import pytest
import torch

from embodied_rl.models import build_policy
from embodied_rl.models.causal_lm.loading import build_tiny_causal_lm
from embodied_rl.models.causal_lm.logprobs import response_logprobs
from embodied_rl.models.memory import (Parameters, Stack, compute_bytes, meta_policy, policy_stacks,
                                       saved_activation_bytes)
from tests.models.openvla.openvla_helpers import SHAPES, make_obs
from tests.models.pi0.pi0_helpers import observations

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BATCH = 16
POLICIES = {
    "openvla_oft fp32": dict(name="openvla_oft"),
    "openvla_oft bf16 LoRA": dict(name="openvla_oft", dtype="bfloat16", lora_rank=4),
    "openvla_oft fused vision": dict(name="openvla_oft", fused_vision=True),
    "openvla (autoregressive)": dict(name="openvla"),
    "openvla_oft two cameras": dict(name="openvla_oft", obs_shapes={"rgb": [32, 32, 6], "state": [5]}),
    "pi0 fp32": dict(name="pi0", num_denoising_steps=3),
    "pi0 bf16 LoRA": dict(name="pi0", num_denoising_steps=3, dtype="bfloat16", lora_rank=4),
}


def _spec(options: dict) -> dict:
    if options["name"] == "pi0":
        return dict(obs_dim=5, action_dim=4, hidden_sizes=[16], action_chunk=4,
                    obs_shapes={"rgb": [32, 32, 3], "state": [5]}, **options)
    return {**dict(obs_dim=5, action_dim=3, hidden_sizes=[32], action_chunk=2, obs_shapes=SHAPES), **options}


@pytest.mark.parametrize("label", list(POLICIES))
def test_a_policy_on_the_meta_device_has_the_real_parameters(label):
    torch.manual_seed(0)
    real, meta = build_policy(**_spec(POLICIES[label])), meta_policy(_spec(POLICIES[label]))
    assert Parameters.of(meta) == Parameters.of(real)
    assert next(meta.parameters()).device.type == "meta"


@pytest.mark.parametrize("label", list(POLICIES))
def test_the_activation_estimate_is_within_25_percent_of_what_autograd_keeps(label):
    torch.manual_seed(0)
    policy = build_policy(**_spec(POLICIES[label]))
    obs = observations(batch=BATCH) if POLICIES[label]["name"] == "pi0" else make_obs(BATCH)
    if "two cameras" in label:
        obs["rgb"] = torch.cat([obs["rgb"], obs["rgb"].flip(1)], dim=-1)
    with torch.no_grad():
        actions, _, _, stored = policy.act(obs)
    _, measured = saved_activation_bytes(policy, lambda: policy.evaluate({**obs, **stored}, actions))
    estimate = sum(s.activation_bytes(BATCH, compute_bytes(policy)) for s in policy_stacks(policy))
    # the goal is 25%; the OpenVLA family is held to 10% (measured 0.96-1.07), so one camera counted instead of two
    # (0.78) fails
    band = 0.25 if POLICIES[label]["name"] == "pi0" else 0.10
    assert 1 - band < estimate / measured < 1 + band, f"{label}: estimate {estimate:.0f} B, measured {measured:.0f} B"


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_the_language_model_estimate_is_within_25_percent(size):
    model, _ = build_tiny_causal_lm(size)
    c = model.config
    prompts, responses = [[5] * 40] * BATCH, [[6] * 24] * BATCH
    _, measured = saved_activation_bytes(model, lambda: response_logprobs(model, prompts, responses, 0))
    stack = Stack("lm", "decoder", c.num_hidden_layers, 64, c.hidden_size, c.intermediate_size,
                  c.num_attention_heads, c.hidden_size // c.num_attention_heads * c.num_key_value_heads)
    assert 0.75 < stack.activation_bytes(BATCH, 4) / measured < 1.25


def test_a_frozen_tower_keeps_nothing_and_checkpointing_keeps_layer_inputs():
    stack = Stack("t", "decoder", 10, 100, 64, 128, 4, 64)
    assert Stack("t", "decoder", 10, 100, 64, 128, 4, 64, trained=False).activation_bytes(8, 2) == 0
    full, checkpointed = stack.activation_bytes(8, 2), stack.activation_bytes(8, 2, checkpointing=True)
    assert checkpointed == 10 * 2 * 64 * 100 * 8 + full / 10
    eager = Stack("t", "decoder", 10, 100, 64, 128, 4, 64, attention="eager")
    assert eager.activation_bytes(8, 2) - full == 10 * 100 * 8 * (4 * 100 * 6 - 4 * 4)  # the kept softmax
