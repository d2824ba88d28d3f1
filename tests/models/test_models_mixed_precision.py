"""Mixed precision of the VLA policies with ``dtype=bfloat16``: frozen weights stored in bf16, trained weights in
float32 (the master weights Adam updates), the network under autocast to bf16. Reference behaviour: a bf16 weight
of about 0.02 has a spacing of 2^-13 (1.2e-4) between representable values, so Adam's steps of 5e-6 (the full GRPO
recipe's learning rate) round away in pure bf16; float32 master weights take every step."""

import pytest
import torch

from embodied_rl.workers.weights import host_weights
from tests.models.openvla.openvla_helpers import make_obs, make_policy
from tests.models.pi0.pi0_helpers import observations, tiny_policy


def _policies(lora_rank: int):
    return {"openvla_oft": (make_policy("openvla_oft", dtype="bfloat16", lora_rank=lora_rank), make_obs(4)),
            "pi0": (tiny_policy(chunk=2, steps=2, dtype="bfloat16", lora_rank=lora_rank), observations(batch=4))}


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_trained_weights_are_float32_and_frozen_ones_bf16(lora_rank):
    for name, (policy, _) in _policies(lora_rank).items():
        dtypes = {p.requires_grad: set() for p in policy.parameters()}
        for p in policy.parameters():
            dtypes[p.requires_grad].add(p.dtype)
        assert dtypes[True] == {torch.float32}, name
        if lora_rank:
            assert dtypes[False] == {torch.bfloat16}, name
        sent = host_weights(policy)  # the weight sync and the checkpoint keep each tensor's dtype
        assert {v.dtype for v in sent.values()} >= ({torch.float32, torch.bfloat16} if lora_rank else {torch.float32})


@pytest.mark.parametrize("name", ["openvla_oft", "pi0"])
def test_adam_at_5e_6_moves_weights_of_0_02_in_a_bf16_policy(name):
    policy, obs = _policies(0)[name]
    with torch.no_grad():  # a matrix of the language model at about 0.02, where bf16's spacing is 1.2e-4
        target = next(p for n, p in policy.named_parameters() if "layers.0" in n and "q_proj.weight" in n)
        target.copy_(torch.full_like(target, 0.02) + 0.004 * torch.rand_like(target))
    before = target.detach().clone()
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=5e-6)
    actions = policy.act(obs)[0]
    for _ in range(50):
        optimizer.zero_grad()
        policy.supervised_loss(obs, actions).backward()
        optimizer.step()
    moved = (target.detach() != before).float().mean().item()
    assert moved > 0.9, f"{name}: {moved:.1%} of the weights moved in 50 steps at lr 5e-6"
    step = (target.detach() - before).abs().max().item()
    assert 1e-5 < step < 1e-3  # Adam's steps, each about lr


@pytest.mark.parametrize("name", ["openvla_oft", "pi0"])
def test_act_and_evaluate_agree_under_autocast(name):
    policy, obs = _policies(4)[name]
    torch.manual_seed(1)
    actions, logp, values, stored = policy.act(obs)
    again, _, values_again = policy.evaluate({**obs, **stored}, actions)
    assert logp.dtype == torch.float32 and values.dtype == torch.float32
    assert (again - logp).abs().max().item() < 1e-3
    assert (values_again - values).abs().max().item() < 1e-3


@pytest.mark.parametrize("name", ["openvla_oft", "pi0"])
def test_a_bf16_network_is_created_in_bf16_not_cast_from_float32(monkeypatch, name):
    """The frozen network is made in bf16 from its first allocation (a 7.5B VLA: 15 GB, not 30 GB in float32 first:
    the full OpenVLA-OFT's build peaked at 28.1 GiB on the GPU before)."""
    created = {}
    reset = torch.nn.Linear.reset_parameters
    monkeypatch.setattr(torch.nn.Linear, "reset_parameters",
                        lambda self: (created.setdefault(id(self), self.weight.dtype), reset(self))[1])
    policy, _ = _policies(4)[name]
    frozen = [m for m in policy.modules() if isinstance(m, torch.nn.Linear) and not m.weight.requires_grad]
    assert len(frozen) > 4 and all(created[id(m)] == torch.bfloat16 for m in frozen)
