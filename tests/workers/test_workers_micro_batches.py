"""Micro-batches with gradient accumulation (``actor.micro_batch_size``) give the gradient of the whole minibatch,
also where the loss normalises over the minibatch (PPO's advantages, GSPO's per-episode ratios) and for SFT's mean;
activation checkpointing (``actor.activation_checkpointing``) recomputes the VLA's layers and changes no gradient."""

import pytest
import torch

from embodied_rl.algorithms.embodied import ALGORITHMS
from embodied_rl.algorithms.embodied.grpo import EPISODE, GroupConfig
from embodied_rl.algorithms.embodied.ppo import PPOConfig
from embodied_rl.algorithms.embodied.sft import SFTConfig
from embodied_rl.models import build_policy
from embodied_rl.workers.micro_batches import minibatch_loss, rank_passes
from tests.models.openvla.openvla_helpers import make_obs, make_policy

N = 10


def _algorithm(name: str, config):
    algorithm = ALGORITHMS.get(name)(config)
    algorithm.updates = 1  # past PPO's critic warm-up (update 0 trains the critic alone)
    return algorithm


def _gradients(policy, algorithm, rows: dict, micro: int | None) -> tuple[float, dict]:
    policy.zero_grad(set_to_none=True)
    loss, metrics, backward = minibatch_loss(lambda part: algorithm.evaluate(policy, part), algorithm.loss, rows,
                                             N, micro)
    backward()
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
    return float(loss), metrics, grads


def _rl_rows(policy, obs, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        actions, logp, values, *stored = policy.act(obs)
    if stored:
        obs = {**obs, **stored[0]}
    return dict(obs=obs, actions=actions, old_logp=logp + 0.05 * torch.randn(N, generator=generator),
                old_values=values, advantages=torch.randn(N, generator=generator) * 2 + 1,
                returns=torch.randn(N, generator=generator), **{EPISODE: torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])})


def _assert_same(whole, micro):
    (loss, metrics, grads), (loss_m, metrics_m, grads_m) = whole, micro
    assert loss_m == pytest.approx(loss, rel=1e-5, abs=1e-6)
    assert metrics_m.keys() == metrics.keys()
    assert grads_m.keys() == grads.keys() and grads
    assert sum(float(g.abs().sum()) for n, g in grads.items() if "critic" not in n) > 0  # the policy's own
    for name, grad in grads.items():
        torch.testing.assert_close(grads_m[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_passes_cover_the_rows_in_order_as_evenly_as_they_come():
    assert rank_passes(10, [10], 0, 4) == [slice(0, 4), slice(4, 7), slice(7, 10)]
    assert rank_passes(10, [10], 0, None) == [slice(0, 10)]


@pytest.mark.parametrize("name, config", [
    ("ppo", PPOConfig(normalize_advantages=True)),  # the advantages normalised over the whole minibatch
    ("gspo", GroupConfig(name="gspo", group_size=2)),  # one ratio per episode: episodes 2 and 3 span micro-batches
])
def test_micro_batches_give_the_minibatch_gradient_of_an_mlp(name, config):
    torch.manual_seed(0)
    policy = build_policy("mlp", 6, 2, hidden_sizes=[16])
    algorithm = _algorithm(name, config)
    rows = _rl_rows(policy, torch.randn(N, 6))
    whole = _gradients(policy, algorithm, rows, None)
    assert whole[0] != 0
    _assert_same(whole, _gradients(policy, algorithm, rows, 3))


def test_micro_batches_give_the_minibatch_gradient_of_a_vla_with_token_ratios():
    policy = make_policy("openvla_oft")
    algorithm = _algorithm("ppo", PPOConfig(normalize_advantages=True, ratio_level="token"))
    rows = _rl_rows(policy, make_obs(N))
    _assert_same(_gradients(policy, algorithm, rows, None), _gradients(policy, algorithm, rows, 4))


def test_micro_batches_give_the_minibatch_gradient_of_sft():
    policy = make_policy("openvla_oft")
    algorithm = ALGORITHMS.get("sft")(SFTConfig())
    with torch.no_grad():
        actions = policy.act(make_obs(N))[0]
    rows = dict(obs=make_obs(N, seed=1), actions=actions)
    _assert_same(_gradients(policy, algorithm, rows, None), _gradients(policy, algorithm, rows, 3))


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_activation_checkpointing_recomputes_layers_and_keeps_the_gradient(lora_rank):
    algorithm = _algorithm("ppo", PPOConfig(normalize_advantages=True))
    plain, checkpointed = make_policy("openvla_oft", lora_rank=lora_rank), make_policy("openvla_oft",
                                                                                       lora_rank=lora_rank)
    assert checkpointed.enable_activation_checkpointing() == 2  # the vision tower and the language model
    rows = _rl_rows(plain, make_obs(N))
    calls = {}
    for name, module in checkpointed.named_modules():
        if name.endswith("layers.0.self_attn"):  # inside the checkpointed region: its hooks run on recompute
            module.register_forward_pre_hook(lambda *args, name=name: calls.update({name: calls.get(name, 0) + 1}))
    _assert_same(_gradients(plain.train(), algorithm, rows, None), _gradients(checkpointed.train(), algorithm, rows,
                                                                              None))
    # the forward, then its recomputation in the backward pass (the frozen vision tower under LoRA has no backward)
    assert calls["language_model.model.layers.0.self_attn"] == 2
    assert calls["vision_backbone.featurizer.encoder.layers.0.self_attn"] == (1 if lora_rank else 2)


def test_an_mlp_has_no_layers_to_checkpoint():
    with pytest.raises(ValueError, match="no transformer layers"):
        build_policy("mlp", 6, 2).enable_activation_checkpointing()


def test_loss_scaling_keeps_fp16_gradients_that_would_underflow():
    """fp16 compute (``policy.options.dtype=float16``): a small loss's gradients underflow in fp16 activations
    (90% of the entries zero here); scaled by 65536 and divided back, they survive, as the actor's GradScaler does."""
    policy = make_policy("openvla_oft", dtype="float16")
    algorithm = ALGORITHMS.get("sft")(SFTConfig())
    with torch.no_grad():
        actions = policy.act(make_obs(N))[0]
    rows = dict(obs=make_obs(N, seed=1), actions=actions)
    small = lambda outputs, minibatch: (lambda v, m: (v * 1e-6, m))(*algorithm.loss(outputs, minibatch))  # noqa

    def zero_fraction(scale: float) -> float:
        policy.zero_grad(set_to_none=True)
        minibatch_loss(lambda part: algorithm.evaluate(policy, part), small, rows, N, 4, scale)[2]()
        grads = [p.grad for p in policy.parameters() if p.grad is not None]
        return sum(int((g == 0).sum()) for g in grads) / sum(g.numel() for g in grads)

    assert zero_fraction(1.0) > 0.5 and zero_fraction(65536.0) < 0.4
