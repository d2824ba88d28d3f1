"""The Hugging Face Llama as a megatron-core GPT: the same logits at TP=1 and TP=2, weights converted both ways
exactly, and ``actor.backend=megatron`` (``LMActorWorker`` on ``MegatronLlamaEngine``) training like the
single-process HF trainer.

Two models: the project's ``tiny`` (tied embeddings, 4 heads = 4 key-value heads, vocabulary 99: padded to 100 at
TP=2) and a grouped-query one (4 heads, 2 key-value groups, untied head, rope base 500, eps 1e-5, perturbed norms).
The trainer runs the data-parallel test's updates (``train``: SFT, DAPO with a loss mask and 2 minibatches, GRPO
with a KL reference over 2 rounds, Dr.GRPO, a one-row update). This process is the HF trainer, then TP rank 0 of 2
(rank 1: this file as a script, started first: imports dominate the time), then rank 0 of two data-parallel
copies at TP=1 (``tp1dp2``), then TP=1 alone. TP=2 x DP=2 over four processes is ``-m heavy``.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("megatron.core", reason="megatron-core is not installed (the `megatron` extra)")
pytestmark = pytest.mark.slow

import test_engines_training_data_parallel as dp  # noqa: E402  (this directory is on sys.path, as for a script)
from tests.tests_helpers import wait_rank_processes  # noqa: E402

# Measured: <= 1.0e-6 on logits up to ~2 in magnitude (float32 rounding of the fused QKV and gate-up matmuls and
# of the TP partial sums), at TP=1 and TP=2 alike.
LOGITS_ATOL = 1e-5
# Measured after the updates (weights moved by up to 1.1e-2): 2.4e-6 at TP=1, 3.1e-6 at TP=2, largest in the MLP
# matrices. That is float32's own noise: the same HF trainer in float64 ends 2.8e-6 away from it in float32
# (AdamW normalises each gradient, so rounding in small gradient entries turns into lr-sized relative changes).
WEIGHTS_ATOL = 1e-5


def models():
    """``{label: HF model}``: ``tiny`` and the grouped-query model, both in eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from embodied_rl.models.causal_lm.chat import build_lm

    tiny, _ = build_lm("tiny")
    config = LlamaConfig(vocab_size=37, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=48, tie_word_embeddings=False, rope_theta=500.0,
                         max_position_embeddings=64, rms_norm_eps=1e-5)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        gqa = LlamaForCausalLM(config)
        with torch.no_grad():  # HF initialises norms to 1: make them matter, and the weights larger
            for param in gqa.parameters():
                param.add_(torch.randn_like(param) * 0.1)
        qwen2 = Qwen2ForCausalLM(Qwen2Config(vocab_size=41, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                             num_key_value_heads=2, intermediate_size=48, tie_word_embeddings=True,
                                             rope_theta=1e6, max_position_embeddings=64, rms_norm_eps=1e-6))
        with torch.no_grad():  # its q/k/v biases start at zero: make them (and the norms) matter
            for param in qwen2.parameters():
                param.add_(torch.randn_like(param) * 0.1)
    return {"tiny": tiny.eval(), "gqa": gqa.eval(), "qwen2": qwen2.eval()}


def inputs(vocab: int):
    """``(input_ids, attention_mask)``, ``[3, 10]``: right-padded rows of 10, 7 and 4 tokens."""
    import torch

    ids = torch.randint(0, vocab, (3, 10), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, 7:] = mask[2, 4:] = 0
    return ids, mask


def megatron_logits(tp: int) -> dict:
    """``{label: (HF logits, Megatron logits)}``, ``[3, 10, V]``, on ``inputs`` (TP initialised, every rank)."""
    import torch

    from embodied_rl.engines.training import megatron_llama

    out = {}
    for label, model in models().items():
        megatron = megatron_llama.MegatronLlama(model.config)
        megatron.load_full(megatron_llama.hf_to_megatron(model.state_dict(), model.config, tp))
        ids, mask = inputs(model.config.vocab_size)
        with torch.no_grad():
            out[label] = (model(input_ids=ids, attention_mask=mask).logits, megatron(ids, mask).logits)
    return out


def start_rank(rank: int, world_size: int, port: int, tp: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[3]),
                                                        os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, __file__, str(rank), str(world_size), str(port), str(tp)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def megatron_parallel(rank: int, world_size: int, port: int, tp: int) -> dict:
    return dict(backend="megatron", rank=rank, world_size=world_size, tensor_parallel_size=tp,
                master_address="127.0.0.1", master_port=port, served_store=True, timeout_s=120)


def run_ranks(world_size: int, tp: int, out: Path) -> tuple:
    """Rank 0 here, ranks 1.. as scripts; rank 0's ``(weights, metrics, logits)``."""
    from embodied_rl.engines.training.data_parallel import serve_rendezvous

    store = serve_rendezvous(timeout_s=120)
    others = [start_rank(rank, world_size, store.port, tp) for rank in range(1, world_size)]
    try:
        result = rank_main(0, world_size, store.port, tp, out)
    except BaseException as error:
        for process in others:
            process.kill()
        error.add_note("other ranks' output:\n" + "\n".join(p.communicate()[0][-3000:] for p in others))
        raise
    wait_rank_processes(others)
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """``{"hf": (weights, metrics), "tp1"/"tp2"/"tp1dp2": (weights, metrics, logits)}``. This process is the
    single-process HF trainer (while TP rank 1, a subprocess, starts), then TP rank 0 of 2, then rank 0 of two
    TP=1 copies, then TP=1 alone."""
    import torch

    from embodied_rl.engines.training.data_parallel import serve_rendezvous

    out = tmp_path_factory.mktemp("megatron_llama")
    stores = [serve_rendezvous(timeout_s=120) for _ in range(2)]  # TP=2's, TP=1's
    rank1 = start_rank(1, 2, stores[0].port, 2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        try:
            _, hf_weights, hf_metrics = dp.train(None)
            tp2 = rank_main(0, 2, stores[0].port, 2, out / "tp2")
        except BaseException as error:
            rank1.kill()  # not left waiting on a collective this process will never join
            error.add_note(f"TP rank 1's output:\n{rank1.communicate()[0][-3000:]}")
            raise
        wait_rank_processes([rank1])
        tp1dp2 = run_ranks(2, 1, out / "tp1dp2")
        tp1 = rank_main(0, 1, stores[1].port, 1, out / "tp1")
    finally:
        torch.set_num_threads(threads)
    return {"hf": (hf_weights, hf_metrics), "tp1": tp1, "tp2": tp2, "tp1dp2": tp1dp2}


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("label", ["tiny", "gqa", "qwen2"])
def test_megatron_copy_gives_the_hf_logits(runs, tp, label):
    import torch

    hf, megatron = runs[f"tp{tp}"][2][label]
    assert megatron.shape == hf.shape  # the vocabulary padding cut off
    torch.testing.assert_close(megatron, hf, rtol=0, atol=LOGITS_ATOL)  # padded positions too: keys masked as HF


@pytest.mark.parametrize("tp", [1, 2])
def test_hf_megatron_hf_round_trip_is_exact(tp):
    import torch

    from embodied_rl.engines.training import megatron_llama

    for model in models().values():
        state = model.state_dict()
        full = megatron_llama.hf_to_megatron(state, model.config, tp)
        back = megatron_llama.megatron_to_hf(full, model.config)
        assert list(back) == list(state)
        for name in state:
            assert torch.equal(back[name], state[name]), name


def assert_trains_like_hf(expected: tuple, run: tuple, label: str) -> None:
    """The final weights (``WEIGHTS_ATOL``) and every update's metrics (measured: 1.7e-6 relative at most)."""
    (expected, expected_metrics), (weights, metrics, _) = expected, run
    assert set(weights) == set(expected)
    worst = max(float(np.abs(weights[k] - expected[k]).max()) for k in weights)
    assert worst < WEIGHTS_ATOL, f"{label}: largest weight difference from the HF trainer {worst:.3g}"
    assert len(metrics) == len(expected_metrics)
    for got, want in zip(metrics, expected_metrics):
        for key in dp.COMPARED:
            if key in want:
                assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key


@pytest.mark.parametrize("run", ["tp1", "tp2", "tp1dp2"])
def test_megatron_trainer_trains_like_one_hf_process(runs, run):
    """Tensor-parallel ranks and data-parallel copies alike (the copies' gradients averaged: without that each
    copy would step on its own half of every minibatch)."""
    assert_trains_like_hf(runs["hf"], runs[run], run)


@pytest.mark.heavy
def test_tp2_dp2_over_four_processes_trains_like_one_hf_process(tmp_path):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _, hf_weights, hf_metrics = dp.train(None)
        result = run_ranks(4, 2, tmp_path)
    finally:
        torch.set_num_threads(threads)
    assert_trains_like_hf((hf_weights, hf_metrics), result, "tp2dp2")


@pytest.mark.parametrize("overrides, bad_key", [
    (["actor.world_size=1"], None), (["actor.world_size=2"], None),
    (["actor.world_size=4", "actor.tensor_parallel_size=2"], None),
    (["actor.world_size=3"], "actor.world_size"),  # tiny's 4 heads do not split 3 ways
    (["actor.world_size=4", "actor.tensor_parallel_size=3"], "actor.tensor_parallel_size"),
    (["actor.world_size=2", "actor.tensor_parallel_size=4"], "actor.tensor_parallel_size")])
def test_trainer_backend_megatron_config(overrides, bad_key):
    from embodied_rl.commands.plan_text import data_parallel_ranks
    from embodied_rl.config.errors import ConfigError
    from embodied_rl.config.reasoning import load_reasoning_config

    overrides = ["actor.backend=megatron", *overrides]
    if bad_key is None:
        actor = load_reasoning_config("math_arith", None, overrides).actor
        assert actor.backend == "megatron"
        assert data_parallel_ranks(actor) == (2 if actor.tensor_parallel_size else 1)
    else:
        with pytest.raises(ConfigError, match=bad_key):
            load_reasoning_config("math_arith", None, overrides)


def test_tensor_parallel_size_is_megatron_only():
    from embodied_rl.config.errors import ConfigError
    from embodied_rl.config.reasoning import load_reasoning_config

    with pytest.raises(ConfigError, match="actor.tensor_parallel_size.*megatron"):
        load_reasoning_config("math_arith", None, ["actor.backend=fsdp", "actor.world_size=2",
                                                   "actor.tensor_parallel_size=2"])


def test_megatron_on_a_machine_with_gpus_is_one_config_error(monkeypatch):
    """The Megatron engine trains on the CPU only: where CUDA is available the config says so and
    names the GPU trainers, before anything starts."""
    import torch

    from embodied_rl.config.errors import ConfigError
    from embodied_rl.config.reasoning import load_reasoning_config

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ConfigError, match="actor.backend='megatron' is out of range on a machine with GPUs.*fsdp"):
        load_reasoning_config("math_arith", None, ["actor.backend=megatron"])


def check_exact_resume(worker, state: dict | None) -> None:
    """One more update (GRPO with a KL reference) from here, then ``state`` (rank 0's checkpoint state, given to
    every rank) loaded back and the same update again: the same weights and metrics, bit for bit (weights, AdamW
    moments and step, the KL reference and the RNGs all came back). Leaves the worker as ``state`` had it."""
    import torch
    import torch.distributed as dist

    from embodied_rl.algorithms.text_rl import TextRLConfig

    box = [state]
    dist.broadcast_object_list(box, src=0)
    state = box[0]
    worker.algorithm = TextRLConfig(group_size=4, kl_coef=0.1)

    def update() -> tuple[dict, dict]:
        metrics = worker.rl_update(dp.make_batch(7), lr=1e-3, temperature=1.0, num_minibatches=2)
        return {k: v.detach().clone() for k, v in worker.engine.model.gpt.named_parameters()}, metrics

    first, first_metrics = update()
    assert worker.load_training_state(state["weights"], state["trainer_state"]) == worker.policy_version
    second, second_metrics = update()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert {k: v for k, v in first_metrics.items() if not k.startswith("time/")} == \
        {k: v for k, v in second_metrics.items() if not k.startswith("time/")}
    worker.load_training_state(state["weights"], state["trainer_state"])


def check_bucketed_gather(engine, tp: int) -> None:
    """Gathering the whole model with small buckets gives the same tensors as with one bucket per 64 MiB, and
    takes one all-gather per bucket (weights leave the trainer in buckets, not tensor by tensor)."""
    import torch
    import torch.distributed as dist

    from embodied_rl.engines.training import megatron_llama

    tensors = dict(engine.model.gpt.named_parameters())
    calls = []
    all_gather = dist.all_gather
    dist.all_gather = lambda *args, **kwargs: calls.append(1) or all_gather(*args, **kwargs)
    try:
        whole = megatron_llama.gather_buckets(tensors, engine.dims)
        buckets = len(calls)
        small = megatron_llama.gather_buckets(tensors, engine.dims, bucket_bytes=4096)
    finally:
        dist.all_gather = all_gather
    split = [name for name in tensors if engine.dims[name] is not None]
    assert len(split) > 4
    assert (buckets, len(calls) - buckets > 1) == ((1, True) if tp > 1 else (0, False))  # TP=1: nothing to gather
    assert all(torch.equal(whole[name], small[name]) for name in tensors)
    assert whole["embedding.word_embeddings.weight"].shape[0] == megatron_llama.padded_vocab(99, tp)


def rank_main(rank: int, world_size: int, port: int, tp: int, out: Path | None = None) -> tuple | None:
    """A TP rank: the trainer's updates, its checkpoint state and HF save (under ``out``), the engine-level
    logits; rank 0 returns ``(weights, metrics, logits)``."""
    import torch
    import torch.distributed as dist

    from embodied_rl.models.causal_lm.loading import load_causal_lm

    worker, weights, metrics = dp.train(megatron_parallel(rank, world_size, port, tp))
    try:
        for name, param in worker.engine.model.gpt.named_parameters():  # replicated norms: equal on every rank
            if worker.engine.dims[name] is None or tp == 1:  # and every weight across data-parallel copies
                copies = [torch.empty_like(param) for _ in range(world_size)]
                dist.all_gather(copies, param.detach())
                assert all(torch.equal(c, copies[0]) for c in copies), name
        check_bucketed_gather(worker.engine, tp)
        state = worker.training_state()
        check_exact_resume(worker, state)
        saved = worker.save_pretrained(str(out / "model") if rank == 0 else "")
        assert (weights is None, state is None, saved is None) == (rank != 0,) * 3, "rank 0 alone returns them"
        logits = megatron_logits(tp)
    finally:
        worker.engine.close()
    if rank != 0:
        return None
    reloaded, _ = load_causal_lm(saved)
    for name, value in reloaded.state_dict().items():
        assert np.array_equal(value.numpy(), weights[name]), name
    optimizer = torch.load(io.BytesIO(state["trainer_state"]))["optimizer"]
    assert set(optimizer["state"]) == {name for name, _ in reloaded.named_parameters()}
    moment = optimizer["state"]["model.layers.0.self_attn.q_proj.weight"]["exp_avg_sq"]
    assert moment.shape == (64, 64) and moment.min() >= 0 and moment.max() > 0
    return weights, metrics, logits


if __name__ == "__main__":
    import faulthandler

    faulthandler.dump_traceback_later(240, exit=True)  # a hung rank prints where it hangs before the test kills it
    import torch

    torch.set_num_threads(1)
    rank_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
