"""``rl_update``'s ``loss_mask``: tokens at 0 are not trained on and not counted in the log-prob difference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embodied_rl.algorithms import text_rl
from embodied_rl.algorithms.text_rl import TextRLConfig
from embodied_rl.workers.lm_actor_worker import LMActorWorker

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14, 15]]
RESPONSES = [[20, 21, 22, 23, 24], [25, 26, 27], [28, 29, 30, 31], [20, 22, 24, 26, 28, 30]]
SCORES = [1.0, 0.0, 0.3, 0.9]  # two groups of 2


def worker(name: str, **overrides) -> LMActorWorker:
    return LMActorWorker(model={"name": "tiny"}, algorithm=TextRLConfig(name=name, group_size=2, **overrides),
                         seed=0, group="lm-actor", rank=0, world_size=1)


def batch(responses, loss_mask=None, rollout_logp=-2.0) -> dict:
    out = dict(prompt_ids=PROMPTS, token_ids=responses, scores=SCORES,
               logprobs=[[rollout_logp] * len(r) for r in responses])
    if loss_mask is not None:
        out["loss_mask"] = loss_mask
    return out


def weights(w: LMActorWorker) -> dict:
    return w.get_weights()[0]


def with_sgd(w: LMActorWorker) -> LMActorWorker:
    """Plain SGD, so that weights compare like gradients: Adam's first step is lr * g / (|g| + eps), which turns
    rounding noise in a gradient near zero (padding changes the matmul shapes) into a visible move."""
    w.optimizer = torch.optim.SGD(w.model.parameters(), lr=1e-3)
    return w


def largest_difference(a: dict, b: dict) -> float:
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


def test_loss_counts_only_unmasked_tokens_by_hand():
    """First step on-policy: every ratio is 1, so the token-mean loss is -sum_b A_b c_b / sum_b c_b over the c_b
    unmasked tokens of row b (here 1, 0, 2, 3): the fully masked row 1 is not trained at all."""
    mask = [[0, 0, 1, 0, 0], [0, 0, 0], [1, 0, 0, 1], [0, 1, 1, 1, 0, 0]]
    config = TextRLConfig(name="dapo", group_size=2)
    adv, _, _ = text_rl.advantages(torch.tensor(SCORES), torch.tensor([len(r) for r in RESPONSES]), config)
    counts = torch.tensor([1.0, 0.0, 2.0, 3.0])
    expected = -(adv * counts).sum().item() / counts.sum().item()
    metrics = worker("dapo").rl_update(batch(RESPONSES, mask), lr=1e-3, temperature=1.0)
    assert metrics["train/trained_responses"] == 3
    assert metrics["train/loss"] == pytest.approx(expected, abs=1e-6)
    unmasked = worker("dapo").rl_update(batch(RESPONSES), lr=1e-3, temperature=1.0)
    lengths = torch.tensor([len(r) for r in RESPONSES], dtype=torch.float)
    assert unmasked["train/loss"] == pytest.approx(-(adv * lengths).sum().item() / lengths.sum().item(), abs=1e-6)


@pytest.mark.parametrize("name", ["dapo", "grpo"])
def test_masked_tail_trains_like_the_truncated_responses(name):
    """A causal LM's earlier tokens do not see later ones, so masking each response's tail gives the gradient (and
    log-prob difference) of the responses cut before it, under token-mean (dapo) and seq-mean-token-mean (grpo)."""
    keep = [2, 3, 1, 4]
    mask = [[1] * k + [0] * (len(r) - k) for r, k in zip(RESPONSES, keep)]
    masked, cut, untouched = with_sgd(worker(name)), with_sgd(worker(name)), with_sgd(worker(name))
    got = masked.rl_update(batch(RESPONSES, mask), lr=1.0, temperature=1.0)
    want = cut.rl_update(batch([r[:k] for r, k in zip(RESPONSES, keep)]), lr=1.0, temperature=1.0)
    assert got["train/loss"] == pytest.approx(want["train/loss"], abs=1e-6)
    assert got["train/rollout_trainer_logp_diff"] == pytest.approx(want["train/rollout_trainer_logp_diff"], abs=1e-6)
    untouched.rl_update(batch(RESPONSES), lr=1.0, temperature=1.0)
    a, b, c = weights(masked), weights(cut), weights(untouched)
    mask_effect = largest_difference(a, c)  # the mask did change the update ...
    assert mask_effect > 1e-4
    assert largest_difference(a, b) < 1e-4 * mask_effect  # ... into the truncated responses' update


def test_masked_tokens_rollout_logprobs_do_not_matter():
    """Env-inserted tokens mid-response (masked) may carry any rollout log-prob: neither the update (TIS on) nor the
    difference metric sees it."""
    mask = [[1, 0, 0, 1, 1], [1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 0, 1, 1]]
    runs = []
    for garbage in (-2.0, -90.0):
        data = batch(RESPONSES, mask)
        data["logprobs"] = [[garbage if m == 0 else -2.0 for m in row] for row in mask]
        w = worker("dapo", tis_cap=2.0)
        runs.append((w.rl_update(data, lr=1e-2, temperature=1.0), weights(w)))
    (m1, w1), (m2, w2) = runs
    assert m1["train/rollout_trainer_logp_diff"] == m2["train/rollout_trainer_logp_diff"]
    assert all(np.array_equal(w1[k], w2[k]) for k in w1)


def test_loss_mask_must_match_the_responses():
    with pytest.raises(ValueError, match=r"loss_mask\[1\]"):
        worker("dapo").rl_update(batch(RESPONSES, [[1] * 5, [1, 1], [1] * 4, [1] * 6]), lr=1e-3, temperature=1.0)
