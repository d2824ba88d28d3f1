"""``sft_update_ids``: SFT on token ids with a loss mask (a multi-turn demonstration whose env turns are not the
model's); ``sft_update`` is the same path on encoded (question, answer) pairs."""

from __future__ import annotations

import numpy as np
import pytest

from embodied_rl.algorithms.text_rl import TextRLConfig
from embodied_rl.models.causal_lm.chat import answer_ids, prompt_ids
from embodied_rl.workers.lm_actor_worker import LMActorWorker

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PAIRS = [("1+2", "3"), ("12*3", "36"), ("9-10", "-1"), ("40+2", "42")]


def worker() -> LMActorWorker:
    return LMActorWorker(model={"name": "tiny"}, algorithm=TextRLConfig(group_size=2), seed=0, group="lm-actor",
                         rank=0, world_size=1)


def weights(w: LMActorWorker) -> dict:
    return w.get_weights()[0]


def max_gap(a: dict, b: dict) -> float:
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


def test_sft_update_is_sft_update_ids_on_the_encoded_pairs():
    by_text, by_ids = worker(), worker()
    tokenizer = by_ids.tokenizer
    got = by_text.sft_update(PAIRS, steps=3, batch_size=2, lr=1e-2)
    want = by_ids.sft_update_ids([dict(prompt_ids=prompt_ids(tokenizer, q), token_ids=answer_ids(tokenizer, a))
                                  for q, a in PAIRS], steps=3, batch_size=2, lr=1e-2)
    assert got["sft/loss"] == want["sft/loss"] and got["sft/trained_tokens"] == got["sft/response_tokens"]
    assert max_gap(weights(by_text), weights(by_ids)) == 0.0


def test_masked_tail_trains_like_the_cut_examples_and_masked_tokens_never_count():
    """A causal LM's earlier tokens do not see later ones: masking each example's tail is training on the examples
    cut before it; and whatever the masked tokens are, nothing changes."""
    tokenizer = worker().tokenizer
    examples = [dict(prompt_ids=prompt_ids(tokenizer, q), token_ids=answer_ids(tokenizer, f"{a} = {a}"))
                for q, a in PAIRS]
    keep = [2, 3, 1, 4]
    masked = [dict(e, loss_mask=[1] * k + [0] * (len(e["token_ids"]) - k)) for e, k in zip(examples, keep)]
    cut = [dict(e, token_ids=e["token_ids"][:k]) for e, k in zip(examples, keep)]
    other_tail = [dict(e, token_ids=e["token_ids"][:k] + [7] * (len(e["token_ids"]) - k)) for e, k in zip(masked, keep)]
    runs = [worker() for _ in range(4)]
    metrics = [w.sft_update_ids(data, steps=3, batch_size=3, lr=1e-2)
               for w, data in zip(runs, (masked, cut, other_tail, examples))]
    assert metrics[0]["sft/loss"] == pytest.approx(metrics[1]["sft/loss"], abs=1e-6)
    assert metrics[0]["sft/trained_tokens"] == sum(keep) < metrics[0]["sft/response_tokens"]
    # (Adam's first steps move each weight by about lr whatever its gradient's size: float noise in a padded
    # batch shows at 1e-5; a real difference at lr)
    assert max_gap(weights(runs[0]), weights(runs[1])) < 1e-4
    assert max_gap(weights(runs[0]), weights(runs[2])) < 1e-4
    assert max_gap(weights(runs[0]), weights(runs[3])) > 1e-3  # the mask did change the update


def test_examples_with_nothing_to_train_are_never_drawn_and_all_masked_is_an_error():
    tokenizer = worker().tokenizer
    example = dict(prompt_ids=prompt_ids(tokenizer, "1+2"), token_ids=answer_ids(tokenizer, "3"))
    silent = dict(example, loss_mask=[0] * len(example["token_ids"]))
    alone, beside = worker(), worker()
    alone.sft_update_ids([example], steps=2, batch_size=4, lr=1e-2)
    beside.sft_update_ids([silent, example, silent], steps=2, batch_size=4, lr=1e-2)
    assert max_gap(weights(alone), weights(beside)) < 1e-6
    with pytest.raises(ValueError, match="no example has a token to train on"):
        worker().sft_update_ids([silent], steps=1, batch_size=1, lr=1e-2)
    with pytest.raises(ValueError, match="loss_mask\\[0\\] must hold one 0 or 1 per response token"):
        worker().sft_update_ids([dict(example, loss_mask=[1])], steps=1, batch_size=1, lr=1e-2)
