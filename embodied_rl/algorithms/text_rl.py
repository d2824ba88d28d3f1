"""The GRPO family for text, composed from the tested tensor functions: which advantage estimator, which ratio level,
clip range, loss aggregation, filters and reward shaping each named algorithm uses.

Batches are group-contiguous: N = P x G responses, the G responses to one prompt next to each other.

| name | advantages | ratio | clip (low, high) | aggregation | extras |
|---|---|---|---|---|---|
| grpo | (s - mean) / std per group | token | 0.2, 0.2 | seq-mean-token-mean | KL to a reference (k1/k2/k3) |
| dr_grpo | s - mean per group | token | 0.2, 0.2 | seq-mean-token-sum-norm | |
| dapo | (s - mean) / std | token | 0.2, 0.28 | token-mean | dynamic sampling, overlong shaping |
| gspo | (s - mean) / std | sequence | 3e-4, 4e-4 | seq-mean-token-mean | |
| gfpo | (s - mean) / std over the kept | token | 0.2, 0.2 | token-mean | keep the k shortest of each group |
| rloo | s - mean of the other G - 1 | token | 0.2, 0.2 | seq-mean-token-mean | |
| reinforce_pp | (s - mean) / std over the batch | token | 0.2, 0.2 | token-mean | |

Every setting can be overridden in the config (``clip_high``, ``loss_agg``, ...); None keeps the algorithm's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import torch

from embodied_rl.algorithms.advantages import (dr_grpo_advantages, grpo_advantages, reinforce_plus_plus_advantages,
                                               rloo_advantages)
from embodied_rl.algorithms.correction import truncated_is_weights
from embodied_rl.algorithms.filters import dynamic_sampling_mask, gfpo_keep_mask
from embodied_rl.algorithms.losses import AGG_MODES, KL_KINDS, aggregate_loss, kl_penalty, policy_loss
from embodied_rl.algorithms.shaping import overlong_penalty

PRESETS = {
    "grpo": dict(advantages="grpo", level="token", clip_low=0.2, clip_high=0.2, loss_agg="seq-mean-token-mean"),
    "dr_grpo": dict(advantages="dr_grpo", level="token", clip_low=0.2, clip_high=0.2,
                    loss_agg="seq-mean-token-sum-norm"),
    "dapo": dict(advantages="grpo", level="token", clip_low=0.2, clip_high=0.28, loss_agg="token-mean",
                 dynamic_sampling=True),
    "gspo": dict(advantages="grpo", level="sequence", clip_low=3e-4, clip_high=4e-4, loss_agg="seq-mean-token-mean"),
    "gfpo": dict(advantages="grpo", level="token", clip_low=0.2, clip_high=0.2, loss_agg="token-mean"),
    "rloo": dict(advantages="rloo", level="token", clip_low=0.2, clip_high=0.2, loss_agg="seq-mean-token-mean"),
    "reinforce_pp": dict(advantages="reinforce_pp", level="token", clip_low=0.2, clip_high=0.2,
                         loss_agg="token-mean"),
}


@dataclass
class TextRLConfig:
    name: str = "grpo"
    """One of ``PRESETS``: grpo, dr_grpo, dapo, gspo, gfpo, rloo, reinforce_pp."""
    group_size: int = 8
    """Responses sampled per prompt."""
    clip_low: Optional[float] = None
    clip_high: Optional[float] = None
    loss_agg: Optional[str] = None
    """token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm (None: the algorithm's)."""
    kl_coef: float = 0.0
    """Weight of the KL to the frozen reference policy (the model as RL starts)."""
    kl_kind: str = "k3"
    dynamic_sampling: Optional[bool] = None
    """Drop groups whose responses all scored the same (they carry no signal); DAPO's default."""
    overlong_max_len: Optional[int] = None
    """DAPO's soft overlong punishment: responses longer than ``overlong_max_len - overlong_cache`` lose up to 1."""
    overlong_cache: int = 8
    gfpo_keep: Optional[int] = None
    """GFPO: keep the ``gfpo_keep`` shortest responses of each group (default for gfpo: half the group)."""
    tis_cap: Optional[float] = None
    """Truncated importance sampling between the rollout engine and the trainer (a quantised rollout copy):
    each token's loss is weighted by min(p_train_old / p_rollout, tis_cap); None: off."""

    def setting(self, key: str):
        value = getattr(self, key, None)
        return PRESETS[self.name].get(key) if value is None else value

    def problems(self) -> Iterator[tuple]:
        if self.name not in PRESETS:
            yield "name", self.name, ", ".join(PRESETS)
            return
        if self.group_size < 1 or (self.name == "rloo" and self.group_size < 2):
            yield "group_size", self.group_size, "an integer >= 1 (rloo: >= 2)"
        if self.setting("loss_agg") not in AGG_MODES:
            yield "loss_agg", self.loss_agg, ", ".join(AGG_MODES)
        if self.kl_kind not in KL_KINDS:
            yield "kl_kind", self.kl_kind, ", ".join(KL_KINDS)
        if self.kl_coef < 0:
            yield "kl_coef", self.kl_coef, ">= 0"
        if self.gfpo_keep is not None and not 1 <= self.gfpo_keep <= self.group_size:
            yield "gfpo_keep", self.gfpo_keep, f"1 to group_size ({self.group_size})"
        if self.tis_cap is not None and self.tis_cap < 1:
            yield "tis_cap", self.tis_cap, "null or >= 1"


def advantages(scores: torch.Tensor, lengths: torch.Tensor, config: TextRLConfig) -> tuple[torch.Tensor,
                                                                                          torch.Tensor, dict]:
    """``(advantages [N], keep [N] bool, metrics)`` from each response's score ``[N]`` and length ``[N]``.

    Overlong shaping is added to the scores first; GFPO keeps the shortest of each group and normalises within the
    kept; dynamic sampling drops groups with one score for all. Dropped responses get advantage 0 and keep False.
    """
    G = config.group_size
    scores = scores.float()
    metrics = {}
    if config.overlong_max_len is not None:
        penalty = overlong_penalty(lengths, config.overlong_max_len, config.overlong_cache)
        scores = scores + penalty
        metrics["reward/overlong_penalty"] = penalty.mean().item()
    keep = torch.ones_like(scores, dtype=torch.bool)
    if config.name == "gfpo":
        keep = gfpo_keep_mask(lengths.float(), G, config.gfpo_keep or max(1, G // 2))
    kind = config.setting("advantages")
    if kind == "grpo" and config.name == "gfpo":
        grouped, kept = scores.view(-1, G), keep.view(-1, G).float()
        count = kept.sum(1, keepdim=True)
        mean = (grouped * kept).sum(1, keepdim=True) / count
        var = (((grouped - mean) * kept) ** 2).sum(1, keepdim=True) / (count - 1).clamp(min=1)
        adv = ((grouped - mean) / (var.sqrt() + 1e-6) * kept).reshape(-1)
    elif kind == "grpo":
        adv = grpo_advantages(scores, G)
    elif kind == "dr_grpo":
        adv = dr_grpo_advantages(scores, G)
    elif kind == "rloo":
        adv = rloo_advantages(scores, G)
    else:
        adv = reinforce_plus_plus_advantages(scores)
    if config.setting("dynamic_sampling"):
        informative = dynamic_sampling_mask(scores, G)
        metrics["train/informative_fraction"] = informative.float().mean().item()
        keep = keep & informative
    adv = torch.where(keep, adv, torch.zeros_like(adv))
    return adv, keep, metrics


def loss(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor, config: TextRLConfig,
         ref_logp: torch.Tensor | None = None, rollout_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """The algorithm's loss on responses ``[B, L]``: the clipped surrogate of ``logp`` (trainer, with grad) against
    ``old_logp`` (the policy that sampled, as the trainer computes it) at the algorithm's ratio level and
    aggregation, times TIS weights against ``rollout_logp`` (the engine's own log-probs) when ``tis_cap`` is set,
    plus ``kl_coef`` x KL to ``ref_logp``."""
    agg = config.setting("loss_agg")
    advantage = adv[:, None].expand_as(logp)
    metrics = {}
    if config.tis_cap is not None and rollout_logp is not None:
        weights = truncated_is_weights(old_logp, rollout_logp, config.tis_cap)
        advantage = advantage * weights  # w >= 0 scales inside the clipped max
        metrics["tis_weight_mean"] = (weights * mask).sum().item() / mask.sum().clamp(min=1).item()
    total, pg = policy_loss(logp, old_logp, advantage, mask, config.setting("clip_low"), config.setting("clip_high"),
                            level=config.setting("level"), agg=agg)
    metrics.update(pg)
    if config.kl_coef > 0 and ref_logp is not None:
        kl = aggregate_loss(kl_penalty(logp, ref_logp, config.kl_kind), mask, agg)
        total = total + config.kl_coef * kl
        metrics["kl_to_reference"] = kl.item()
    return total, metrics
