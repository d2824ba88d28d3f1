"""The GRPO family, one table for text and embodied tasks.

Every member scores whole samples (a response; an episode) and compares each with the other members of its group
(the G responses to one prompt; the G episodes that start from one initial state). They differ only in the
settings below, so ``algorithm.name=dapo`` means the same on ``math_arith`` and on ``maniskill_pickcube``; any
setting can be overridden in the config (``clip_high``, ``loss_agg``, ...), None keeps the member's own.

| name | advantages | ratio | clip (low, high) | aggregation | extras |
|---|---|---|---|---|---|
| grpo | (s - mean) / std per group | token | 0.2, 0.2 | seq-mean-token-mean | KL to a reference (k1/k2/k3) |
| dr_grpo | s - mean per group | token | 0.2, 0.2 | seq-mean-token-sum-norm | |
| dapo | (s - mean) / std | token | 0.2, 0.28 | token-mean | dynamic sampling (+ overlong shaping on text) |
| gspo | (s - mean) / std | sequence | 3e-4, 4e-4 | seq-mean-token-mean | |
| gfpo | (s - mean) / std over the kept | token | 0.2, 0.2 | token-mean | keep the k shortest of each group |
| rloo | s - mean of the other G - 1 | token | 0.2, 0.2 | seq-mean-token-mean | |
| reinforce_pp | (s - mean) / std over the batch | token | 0.2, 0.2 | token-mean | |

Words, the same in both worlds: a *sequence* is a response or an episode; a *token* is a response token or one
env step's decision (the finest ratio the policy offers: ``ratio_level`` decision or token on embodied tasks);
``loss_agg`` says how per-token losses are averaged (``losses.AGG_MODES``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from embodied_rl.algorithms.advantages import kept_group_advantages
from embodied_rl.algorithms.filters import dynamic_sampling_mask, gfpo_keep_mask
from embodied_rl.algorithms.registry import ADVANTAGE_ESTIMATORS


@dataclass(frozen=True)
class Member:
    """One named algorithm of the family: its defaults."""

    advantages: str
    """A name in ``ADVANTAGE_ESTIMATORS`` (each takes group-contiguous scores ``[N]`` and the group size)."""
    clip_low: float
    clip_high: float
    loss_agg: str
    sequence_ratio: bool = False
    """GSPO: one ratio per sequence, exp(mean over its tokens of the log-ratio)."""
    dynamic_sampling: bool = False
    """Drop groups whose members all scored the same (no signal) and sample more to fill the batch."""
    keep_shortest: bool = False
    """GFPO: keep the ``gfpo_keep`` shortest members of each group (default half) and normalise among them."""


FAMILY = {
    "grpo": Member("grpo", 0.2, 0.2, "seq-mean-token-mean"),
    "dr_grpo": Member("dr_grpo", 0.2, 0.2, "seq-mean-token-sum-norm"),
    "dapo": Member("grpo", 0.2, 0.28, "token-mean", dynamic_sampling=True),
    "gspo": Member("grpo", 3e-4, 4e-4, "seq-mean-token-mean", sequence_ratio=True),
    "gfpo": Member("grpo", 0.2, 0.2, "token-mean", keep_shortest=True),
    "rloo": Member("rloo", 0.2, 0.2, "seq-mean-token-mean"),
    "reinforce_pp": Member("reinforce_pp", 0.2, 0.2, "token-mean"),
}


def group_advantages(scores: torch.Tensor, lengths: torch.Tensor, group_size: int, member: Member,
                     dynamic_sampling: bool, gfpo_keep: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor,
                                                                                      dict]:
    """``(advantages [N], keep [N] bool, metrics)`` from group-contiguous scores ``[N]`` and lengths ``[N]`` (a
    response's tokens; an episode's trained steps).

    GFPO keeps the shortest of each group and normalises within the kept; dynamic sampling drops groups with one
    score for all. Dropped members get advantage 0 and keep False.
    """
    G = group_size
    scores = scores.float()
    metrics = {}
    keep = torch.ones_like(scores, dtype=torch.bool)
    if member.keep_shortest:
        keep = gfpo_keep_mask(lengths.float(), G, gfpo_keep or max(1, G // 2))
        adv = kept_group_advantages(scores, keep, G)
    else:
        adv = ADVANTAGE_ESTIMATORS.get(member.advantages)(scores, G)
    if dynamic_sampling:
        informative = dynamic_sampling_mask(scores, G)
        metrics["train/informative_fraction"] = informative.float().mean().item()
        keep = keep & informative
    adv = torch.where(keep, adv, torch.zeros_like(adv))
    return adv, keep, metrics
