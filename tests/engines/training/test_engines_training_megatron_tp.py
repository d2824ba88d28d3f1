"""Megatron-core tensor parallelism on CPU: TP=2 over two gloo processes computes what TP=1 in one process does,
from the same initial full weights on the same batch (logits, log-probs, and the weights after a few steps)."""

import os
import time

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core is not installed (the `megatron` extra)")

SPEC = dict(hidden=32, layers=2, heads=4, ffn=64, vocab=48, max_positions=16)
STEPS = 3
# SGD: the update is the gradient, so TP=2 must match TP=1 to rounding (measured: 6e-8 at most). AdamW divides by
# sqrt(v) + eps, which turns rounding-level differences of gradients near eps into O(lr) differences of the update
# (measured at eps=1e-8: 2e-4 with lr=1e-2; some gradients are analytically 0, e.g. the key bias's); eps=1e-4
# keeps that to 1e-6.
OPTIMIZERS = {"sgd": dict(optimizer="sgd", lr=1.0), "adamw": dict(optimizer="adamw", lr=1e-2, adam_eps=1e-4)}


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, target_ids)``, both ``[3, 11]``: next-token pairs of three random sequences."""
    tokens = torch.randint(0, SPEC["vocab"], (3, 12), generator=torch.Generator().manual_seed(7))
    return tokens[:, :-1], tokens[:, 1:]


def run_rank(rank: int, tp: int, port: int, out_dir: str) -> None:
    """One TP rank: per optimizer, an engine's forward, log-probs and ``STEPS`` training steps; rank 0 saves what
    it saw to ``out_dir``."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    from embodied_rl.engines.training import megatron_lm

    megatron_lm.initialize_tensor_parallel(tp, rank=rank, master_port=port, timeout_s=60, served_store=True)
    try:
        input_ids, target_ids = batch()
        results = {}
        for label, options in OPTIMIZERS.items():
            engine = megatron_lm.MegatronGPTEngine(megatron_lm.GPTSpec(**SPEC), seed=3, **options)
            initial = engine.full_state_dict()
            with torch.no_grad():
                logits = engine.logits(input_ids)
                logprobs = engine.token_logprobs(input_ids, target_ids)
            losses = [engine.train_step(input_ids, target_ids) for _ in range(STEPS)]
            results[label] = dict(initial=initial, logits=logits, logprobs=logprobs, losses=losses,
                                  trained=engine.full_state_dict())
        # one SGD step through the gathered logits: their backward hands each rank its vocabulary slice
        engine = megatron_lm.MegatronGPTEngine(megatron_lm.GPTSpec(**SPEC), seed=3, **OPTIMIZERS["sgd"])
        logp = torch.log_softmax(engine.logits(input_ids), -1).gather(-1, target_ids[..., None])
        (-logp.mean()).backward()
        engine.optimizer.step()
        results["via_logits"] = engine.full_state_dict()
        if rank == 0:
            torch.save(results, os.path.join(out_dir, f"tp{tp}.pt"))
    finally:
        megatron_lm.shutdown()


def run_both(out_dir, timeout_s: float = 150) -> dict[int, dict]:
    """TP=1 (one process) and TP=2 (two) at the same time; their rank-0 results by TP size."""
    import torch.multiprocessing as mp

    from embodied_rl.engines.training.data_parallel import serve_rendezvous

    stores = {tp: serve_rendezvous(timeout_s=60) for tp in (1, 2)}  # served here, alive until the ranks are done
    runs = {tp: mp.start_processes(run_rank, args=(tp, stores[tp].port, str(out_dir)), nprocs=tp, join=False,
                                   start_method="spawn") for tp in (1, 2)}
    deadline = time.monotonic() + timeout_s
    try:
        for tp, context in runs.items():
            while not context.join(timeout=1):  # raises with the rank's traceback if one failed
                if time.monotonic() > deadline:
                    raise TimeoutError(f"TP={tp} processes still running after {timeout_s:.0f} s")
    finally:
        for context in runs.values():
            for process in context.processes:
                if process.is_alive():
                    process.terminate()
    return {tp: torch.load(out_dir / f"tp{tp}.pt") for tp in runs}


def assert_weights_close(tp2: dict, tp1: dict, atol: float) -> None:
    assert tp1.keys() == tp2.keys()
    for name in tp1:
        torch.testing.assert_close(tp2[name], tp1[name], rtol=1e-5, atol=atol, msg=lambda m: f"{name}: {m}")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_both(tmp_path_factory.mktemp("megatron_tp"))


def test_tp2_starts_from_the_tp1_weights_and_computes_the_same_logits(results):
    tp1, tp2 = results[1]["sgd"], results[2]["sgd"]
    assert_weights_close(tp2["initial"], tp1["initial"], atol=0)  # the same draws, sliced
    assert tp1["initial"]["output_layer.weight"].shape == (SPEC["vocab"], SPEC["hidden"])  # gathered, not a shard
    assert tp2["logits"].shape == (3, 11, SPEC["vocab"])
    torch.testing.assert_close(tp2["logits"], tp1["logits"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(tp2["logprobs"], tp1["logprobs"], rtol=1e-5, atol=1e-6)
    # the vocab-parallel log-probs are those of the gathered logits
    _, target_ids = batch()
    expected = torch.log_softmax(tp2["logits"], -1).gather(-1, target_ids[..., None]).squeeze(-1)
    torch.testing.assert_close(tp2["logprobs"], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer, atol", [("sgd", 1e-6), ("adamw", 1e-5)])
def test_tp2_training_steps_reach_the_tp1_weights(results, optimizer, atol):
    tp1, tp2 = results[1][optimizer], results[2][optimizer]
    assert tp1["losses"][-1] < tp1["losses"][0] - 0.3  # the steps did train
    assert max(abs(a - b) for a, b in zip(tp1["losses"], tp2["losses"])) < 1e-5
    moved = max((tp1["trained"][k] - tp1["initial"][k]).abs().max().item() for k in tp1["initial"])
    assert moved > 1e3 * atol
    assert_weights_close(tp2["trained"], tp1["trained"], atol=atol)


def test_tp2_step_through_the_gathered_logits_reaches_the_tp1_weights(results):
    assert_weights_close(results[2]["via_logits"], results[1]["via_logits"], atol=1e-6)
    initial = results[1]["sgd"]["initial"]
    assert max((results[1]["via_logits"][k] - initial[k]).abs().max().item() for k in initial) > 1e-2
