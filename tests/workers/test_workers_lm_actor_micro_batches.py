"""The LM trainer's memory features change memory, not the update: micro-batched (by rows or by a token budget),
checkpointed passes give the whole minibatch's gradients, for every loss aggregation, and the KL reference's
cheaper forms score like a full copy."""

from __future__ import annotations

import pytest
import torch

from embodied_rl.algorithms.text_rl import TextRLConfig
from embodied_rl.engines.training.micro_batches import accumulation_weight, micro_batches, pad_passes
from embodied_rl.workers.lm_actor_worker import LMActorWorker

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14, 15], [16, 17, 18], [19, 5]]
RESPONSES = [[20, 21, 22, 23, 24], [25, 26, 27], [28, 29, 30, 31], [20, 22, 24, 26, 28, 30], [21, 23], [22, 24, 26]]
SCORES = [1.0, 0.0, 0.3, 0.9, 0.1, 0.7]  # three groups of 2


def worker(name: str = "grpo", memory: dict | None = None, **algorithm) -> LMActorWorker:
    w = LMActorWorker(model={"name": "tiny"}, algorithm=TextRLConfig(name=name, group_size=2, **algorithm), seed=0,
                      memory=memory, group="lm-actor", rank=0, world_size=1)
    # plain SGD: one step moves the weights by lr x the gradient, so weights compare like gradients
    w.optimizer = torch.optim.SGD(w.model.parameters(), lr=1.0)
    return w


def batch() -> dict:
    return dict(prompt_ids=PROMPTS, token_ids=RESPONSES, scores=SCORES,
                logprobs=[[-2.0] * len(r) for r in RESPONSES])


def moved(w: LMActorWorker) -> dict:
    """The weights' change in one update: -(the gradient), with SGD at lr 1."""
    before = {k: v.detach().clone() for k, v in w.model.state_dict().items()}
    metrics = w.rl_update(batch(), lr=1.0, temperature=1.0, max_grad_norm=1e9)
    return {k: v.detach() - before[k] for k, v in w.model.state_dict().items()}, metrics


def largest_difference(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def largest(a: dict) -> float:
    return max(float(v.abs().max()) for v in a.values())


@pytest.mark.parametrize("name, agg", [("grpo", None), ("dr_grpo", None), ("gspo", None),
                                       ("grpo", "seq-mean-token-sum")])
@pytest.mark.parametrize("memory", [{"micro_batch_size": 1}, {"micro_batch_size": 4},
                                    {"max_tokens_per_micro_batch": 16},
                                    {"micro_batch_size": 2, "activation_checkpointing": True}])
def test_micro_batched_gradients_equal_the_whole_batch(name, agg, memory):
    """One minibatch of 6 responses (KL to the reference on): the micro-batched update moves every weight as the
    one-pass update does, and reports the same loss."""
    options = dict(kl_coef=0.1, loss_agg=agg)
    whole, whole_metrics = moved(worker(name, **options))
    parts, part_metrics = moved(worker(name, memory, **options))
    assert largest(whole) > 1e-4  # the update moves the weights at all
    assert largest_difference(whole, parts) < 1e-5 * largest(whole) + 1e-7
    assert part_metrics["train/loss"] == pytest.approx(whole_metrics["train/loss"], rel=1e-5, abs=1e-7)


def test_an_unweighted_micro_batch_sum_is_not_the_gradient():
    """The test above can fail: adding the passes' own losses unweighted (each its own token mean) gives another
    gradient, as a plain per-pass mean would."""
    whole, _ = moved(worker("grpo"))
    w = worker("grpo", {"micro_batch_size": 2})
    import embodied_rl.workers.lm_actor_worker as module

    original = module.accumulation_weight
    module.accumulation_weight = lambda part, total, scale=1.0: 1.0 if part else 0.0
    try:
        wrong, _ = moved(w)
    finally:
        module.accumulation_weight = original
    assert largest_difference(whole, wrong) > 0.1 * largest(whole)


def test_micro_batches_cut_by_rows_and_padded_tokens():
    assert micro_batches([0, 1, 2, 3, 4], [5, 5, 5, 5, 5], max_rows=2) == [[0, 1], [2, 3], [4]]
    # padded tokens: rows x the longest row; 3 x 4 = 12 > 10 closes the pass; a row past the budget alone
    assert micro_batches([0, 1, 2, 3], [4, 3, 2, 30], max_tokens=10) == [[0, 1], [2], [3]]
    assert micro_batches([7, 8], [1, 1]) == [[7, 8]]
    assert micro_batches([], []) == []
    assert pad_passes([[1], [2]], 4) == [[1], [2], [], []]
    assert accumulation_weight(3, 12) == 0.25
    assert accumulation_weight(3, 12, 2.0) == 0.5
    assert accumulation_weight(0, 12) == 0.0
    with pytest.raises(ValueError):
        micro_batches([1], [1], max_rows=0)


def test_lora_reference_is_the_adapters_as_rl_started():
    """Under LoRA the reference is the start's adapters swapped into the live model (no copy of the base): its
    log-probs are the starting model's after the adapters moved, and the live adapters come back."""
    w = LMActorWorker(model={"name": "tiny"}, algorithm=TextRLConfig(name="grpo", group_size=2, kl_coef=0.1),
                      seed=0, lora={"rank": 4}, group="lm-actor", rank=0, world_size=1)
    start, _ = w._logprobs(w.model, PROMPTS, RESPONSES)
    w.rl_update(batch(), lr=0.05, temperature=1.0)
    assert w.reference.copy is None and w.reference.adapters
    now, _ = w._logprobs(w.model, PROMPTS, RESPONSES)
    with w.reference.module() as reference:
        scored, _ = w._logprobs(reference, PROMPTS, RESPONSES)
    after, _ = w._logprobs(w.model, PROMPTS, RESPONSES)
    assert (now - start).abs().max() > 1e-4  # the update moved the adapters
    assert torch.allclose(scored, start, atol=1e-6)
    assert torch.equal(after, now)
