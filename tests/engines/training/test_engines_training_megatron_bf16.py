"""``actor.backend=megatron`` on a bf16 checkpoint: the forward and backward run in bf16 (Megatron's ``bf16``
config) while AdamW updates float32 masters, as the single-process HF trainer does with bf16 autocast over float32
masters. One process, TP=1 (the TP and DP splits are ``test_engines_training_megatron_llama``'s).

A tiny Qwen2 (biases on q, k, v) saved in bf16 by ``save_pretrained``, trained by both trainers on the same SFT and
GRPO updates: the gradient norms agree to bf16's precision and so do the masters' updates; a step too small for
bf16 still moves the masters; a checkpoint resumes bit for bit.
"""

from __future__ import annotations

import pytest

pytest.importorskip("megatron.core", reason="megatron-core is not installed (the `megatron` extra)")

import test_engines_training_data_parallel as dp  # noqa: E402  (this directory is on sys.path, as for a script)

EXAMPLES = [("1+1", "2"), ("2+3", "5"), ("9+9", "18"), ("12+30", "42")]


def worker_for(checkpoint, backend: str, port: int | None = None):
    import torch

    from embodied_rl.algorithms.text_rl import TextRLConfig
    from embodied_rl.workers.lm_actor_worker import LMActorWorker

    torch.set_num_threads(1)
    parallel = None if backend == "single" else dict(backend="megatron", rank=0, world_size=1,
                                                     master_address="127.0.0.1", master_port=port,
                                                     served_store=True, timeout_s=60)
    return LMActorWorker(model={"name": str(checkpoint)}, algorithm=TextRLConfig(group_size=4, kl_coef=0.1), seed=5,
                         data_parallel=parallel, group="lm-actor", rank=0, world_size=1)


def updates(worker) -> list[dict]:
    return [worker.sft_update(EXAMPLES, steps=2, batch_size=3, lr=1e-3),
            worker.rl_update(dp.make_batch(0), lr=1e-3, temperature=1.0, num_minibatches=2),
            worker.rl_update(dp.make_batch(1), lr=1e-3, temperature=1.0)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``(checkpoint, HF metrics, HF master weights, the Megatron worker, its metrics)``; the Megatron worker's
    engine is closed at the end of the module."""
    from embodied_rl.engines.training.data_parallel import serve_rendezvous
    from embodied_rl.models.causal_lm.tiny_checkpoints import write_tiny_checkpoint

    checkpoint = write_tiny_checkpoint(tmp_path_factory.mktemp("bf16") / "qwen2", "qwen2", "bfloat16")
    hf = worker_for(checkpoint, "single")
    hf_metrics = updates(hf)
    hf_masters = {k: v.detach().clone() for k, v in hf.model.state_dict().items()}
    store = serve_rendezvous(timeout_s=60)
    megatron = worker_for(checkpoint, "megatron", store.port)
    try:
        yield checkpoint, hf_metrics, hf_masters, megatron, updates(megatron)
    finally:
        megatron.engine.close()


def test_parameters_are_bf16_and_the_optimizer_holds_float32_masters(trained):
    import torch

    *_, worker, _ = trained
    assert {p.dtype for p in worker.engine.model.parameters()} == {torch.bfloat16}
    optimized = [p for group in worker.optimizer.param_groups for p in group["params"]]
    assert optimized and {p.dtype for p in optimized} == {torch.float32}
    assert len(optimized) == len(list(worker.engine.model.parameters()))
    weights, _ = worker.get_weights()  # what generation workers get: the checkpoint's dtype
    assert {v.dtype for v in weights.values()} == {torch.bfloat16}


def test_trains_like_the_hf_trainer_under_bf16_autocast(trained):
    import torch

    _, hf_metrics, hf_masters, worker, metrics = trained
    for got, want in zip(metrics[1:], hf_metrics[1:]):  # measured: 3.9235 against 3.9267, 3.7109 against 3.7196
        assert got["train/grad_norm"] == pytest.approx(want["train/grad_norm"], rel=1e-2)
    assert metrics[0]["sft/loss"] == pytest.approx(hf_metrics[0]["sft/loss"], rel=1e-3)
    masters = worker.engine.full_state_dict()
    assert {v.dtype for v in masters.values()} == {torch.float32}
    # The two runs' updates (masters minus the checkpoint), compared as whole vectors: AdamW gives weights whose
    # gradient is analytically 0 (the key biases: softmax ignores a shift of every key) lr-sized steps in the
    # direction of rounding noise, so single weights can differ by as much as they moved.
    initial = worker_initial(trained)
    hf_update = torch.cat([(hf_masters[k] - initial[k]).flatten() for k in initial])
    update = torch.cat([(masters[k] - initial[k]).flatten() for k in initial])
    assert hf_update.abs().max() > 4e-3  # the five steps at lr 1e-3 did move the weights
    assert (update - hf_update).norm() / hf_update.norm() < 0.1  # measured: 0.035


def worker_initial(trained) -> dict:
    import torch

    from embodied_rl.models.causal_lm.loading import load_causal_lm

    model, _ = load_causal_lm(str(trained[0]))
    return {k: v.to(torch.float32) for k, v in model.state_dict().items()}


def test_a_step_below_bf16_spacing_moves_the_masters(trained):
    """At lr 1e-7 an AdamW step changes a weight by about 1e-7, far below bf16's spacing near 0.02 (1.2e-4): a
    bf16-only optimizer would leave every weight as it was; the masters take it and the bf16 weights follow them."""
    import torch

    *_, worker, _ = trained
    masters = {k: v.detach().clone() for k, v in worker.engine.masters.items()}
    worker.sft_update(EXAMPLES, steps=1, batch_size=2, lr=1e-7)
    moved = max((worker.engine.masters[k] - masters[k]).abs().max().item() for k in masters)
    assert 0 < moved < 1e-5
    for name, param in worker.engine.model.gpt.named_parameters():
        assert torch.equal(param, worker.engine.masters[name].to(torch.bfloat16)), name


def test_a_checkpoint_resumes_bit_for_bit(trained):
    import torch

    *_, worker, _ = trained
    state = worker.training_state()

    def update() -> tuple[dict, dict]:
        metrics = worker.rl_update(dp.make_batch(7), lr=1e-3, temperature=1.0, num_minibatches=2)
        masters = {k: v.detach().clone() for k, v in worker.engine.masters.items()}
        return masters, {k: v for k, v in metrics.items() if not k.startswith("time/")}

    first = update()
    worker.load_training_state(state["weights"], state["trainer_state"])
    second = update()
    assert all(torch.equal(first[0][k], second[0][k]) for k in first[0])
    assert first[1] == second[1]
