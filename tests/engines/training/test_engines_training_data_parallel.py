"""Data-parallel LM training (DDP, FSDP2) over 2 gloo CPU processes equals one process training on the whole batch.

2 ranks run as subprocesses of this file as a script, fresh ones for each backend: every rank builds the same
``LMActorWorker`` (no Ray) and runs the same updates on the same full batches (SFT with uneven slices, DAPO's token-mean with a loss mask and 2 minibatches, GRPO with a KL reference over 2
rounds, Dr.GRPO's sum-norm); rank 0 writes the final full weights and its metrics, which must match a
single-process worker's. Without the loss scaling the weights differ by ~7e-3.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.tests_helpers import start_rank_processes, wait_rank_processes

pytestmark = pytest.mark.slow  # ~18 s of CPU in all, most of it 3 processes importing torch and transformers
BACKENDS = ("ddp", "fsdp", "fsdp_micro")
"""``fsdp_micro``: FSDP with micro-batches by a token budget, so the ranks cut their slices into different numbers
of passes and must still run the same number of collective forwards (empty passes padded in)."""
MICRO = {"max_tokens_per_micro_batch": 20}

EXAMPLES = [("1+1", "2"), ("2+3", "5"), ("9+9", "18"), ("12+30", "42")]
UPDATES = [  # (algorithm overrides, update_rounds, num_minibatches, loss_mask: random / none / all rows but one)
    (dict(name="dapo"), 1, 2, "random"),
    (dict(name="grpo", kl_coef=0.1), 2, 2, "none"),
    (dict(name="dr_grpo"), 1, 1, "none"),
    (dict(name="grpo"), 1, 1, "one row"),  # rank 1's slice is empty: it must still join the forward and backward
]


def make_batch(seed: int, n: int = 8) -> dict:
    """``n`` responses of uneven lengths (1-8 tokens) to random prompts, scored at random."""
    rng = np.random.default_rng(seed)
    prompts = [[int(t) for t in rng.integers(5, 30, size=rng.integers(3, 7))] for _ in range(n)]
    tokens = [[int(t) for t in rng.integers(5, 30, size=rng.integers(1, 9))] for _ in range(n)]
    return dict(prompt_ids=prompts, token_ids=tokens, scores=[float(s) for s in rng.random(n)],
                logprobs=[[float(v) for v in rng.normal(-3.0, 0.3, size=len(t))] for t in tokens],
                loss_mask=[[int(v) for v in (rng.random(len(t)) > 0.3)] for t in tokens])


def train(data_parallel: dict | None, memory: dict | None = None):
    """``(worker, weights or None, metrics)`` after the SFT and the three RL updates (weights and metrics: rank 0)."""
    import torch

    from embodied_rl.algorithms.text_rl import TextRLConfig
    from embodied_rl.workers.lm_actor_worker import LMActorWorker

    torch.set_num_threads(1)
    rank = (data_parallel or {}).get("rank", 0)
    worker = LMActorWorker(model={"name": "tiny"}, algorithm=TextRLConfig(group_size=4), seed=5,
                           data_parallel=data_parallel, memory=memory, group="lm-actor", rank=rank,
                           world_size=(data_parallel or {}).get("world_size", 1))
    metrics = [worker.sft_update(EXAMPLES, steps=2, batch_size=3, lr=1e-3),
               worker.sft_update(EXAMPLES, steps=1, batch_size=1, lr=1e-3)]
    for i, (overrides, rounds, minibatches, masked) in enumerate(UPDATES):
        worker.algorithm = TextRLConfig(group_size=4, tis_cap=2.0, **overrides)
        batch = make_batch(i)
        if masked == "none":
            del batch["loss_mask"]
        elif masked == "one row":
            batch["loss_mask"] = [[int(j == 0)] * len(t) for j, t in enumerate(batch["token_ids"])]
        metrics.append(worker.rl_update(batch, lr=1e-3, temperature=1.0, update_rounds=rounds,
                                        num_minibatches=minibatches))
    weights = worker.get_weights()
    return worker, None if weights is None else {k: v.numpy() for k, v in weights[0].items()}, metrics


def start_ranks(out: Path, backend: str, store, world_size: int = 2) -> list[subprocess.Popen]:
    """``backend`` in ``world_size`` fresh rank processes joining ``store`` (served here); rank 0 writes
    ``out/<backend>/{weights.npz,metrics.json}``."""
    (out / backend).mkdir(exist_ok=True)
    return start_rank_processes(__file__, world_size, backend, store.port, out / backend)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[tuple[dict, list], Path]:
    """The single-process run (weights, metrics), computed while the DDP ranks run; then the FSDP ranks (each
    backend in processes of its own) write theirs under the path."""
    from embodied_rl.engines.training.data_parallel import serve_rendezvous

    out = tmp_path_factory.mktemp("data_parallel")
    stores = {backend: serve_rendezvous(timeout_s=120) for backend in BACKENDS}
    ranks = start_ranks(out, BACKENDS[0], stores[BACKENDS[0]])
    try:
        _, weights, metrics = train(None)
    finally:
        wait_rank_processes(ranks)
    for backend in BACKENDS[1:]:
        wait_rank_processes(start_ranks(out, backend, stores[backend]))
    return (weights, metrics), out


COMPARED = ["sft/loss", "sft/first_loss", "train/loss", "train/grad_norm", "train/rollout_trainer_logp_diff",
            "train/kl_to_reference", "train/trained_responses", "train/gradient_steps"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_gloo_ranks_train_like_one_process(backend, runs):
    (expected_weights, expected_metrics), two_ranks = runs
    weights = dict(np.load(two_ranks / backend / "weights.npz"))
    metrics = json.loads((two_ranks / backend / "metrics.json").read_text())
    assert set(weights) == set(expected_weights)
    worst = max(float(np.abs(weights[k] - expected_weights[k]).max()) for k in weights)
    assert worst < 1e-5, f"{backend}: largest weight difference from one process {worst:.3g}"
    for got, want in zip(metrics, expected_metrics):
        for key in COMPARED:
            if key in want:
                assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key


def rank_main(backend: str, rank: int, world_size: int, port: int, out: Path) -> None:
    worker, weights, metrics = train(dict(backend=backend.removesuffix("_micro"), rank=rank, world_size=world_size,
                                          master_address="127.0.0.1", master_port=port, served_store=True,
                                          timeout_s=120), MICRO if backend.endswith("_micro") else None)
    state = worker.training_state()
    saved = worker.save_pretrained(str(out / "model"))
    assert (weights is None, state is None, saved is None) == (rank != 0,) * 3, "rank 0 alone returns them"
    if rank == 0:
        from embodied_rl.models.causal_lm.loading import load_causal_lm

        reloaded, _ = load_causal_lm(saved)
        for name, value in reloaded.state_dict().items():
            assert np.array_equal(value.numpy(), weights[name]), name
        np.savez(out / "weights.npz", **weights)
        (out / "metrics.json").write_text(json.dumps(metrics))
    worker.engine.close()


if __name__ == "__main__":
    import faulthandler

    faulthandler.dump_traceback_later(240, exit=True)  # a hung rank prints where it hangs before the test kills it
    rank, world_size, backend, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), \
        Path(sys.argv[5])
    rank_main(backend, rank, world_size, port, out)
