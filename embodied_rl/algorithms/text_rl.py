"""The GRPO family on text: a response is a sequence of tokens, each group the G responses to one prompt. The
members and their defaults are ``group_family.FAMILY``, shared with embodied tasks; this adds what only text has
(overlong shaping of long responses, TIS against a quantised rollout copy).

Batches are group-contiguous: N = P x G responses, the G responses to one prompt next to each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import torch

from embodied_rl.algorithms.correction import truncated_is_weights
from embodied_rl.algorithms.group_family import FAMILY, group_advantages
from embodied_rl.algorithms.losses import AGG_MODES, KL_KINDS, aggregate_loss, kl_penalty, policy_loss
from embodied_rl.algorithms.shaping import overlong_penalty

TEXT_RATIO_LEVELS = ("token", "sequence")


@dataclass
class TextRLConfig:
    name: str = "grpo"
    """A member of the GRPO family (``group_family.FAMILY``): grpo, dr_grpo, dapo, gspo, gfpo, rloo, reinforce_pp."""
    group_size: int = 8
    """Responses sampled per prompt."""
    clip_low: Optional[float] = None
    clip_high: Optional[float] = None
    loss_agg: Optional[str] = None
    """token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm (None: the algorithm's)."""
    kl_coef: float = 0.0
    """Weight of the KL to the frozen reference policy (the model as RL starts)."""
    kl_kind: str = "k3"
    ratio_level: Optional[str] = None
    """'token' or 'sequence' (GSPO's one ratio per response); None: the algorithm's."""
    dynamic_sampling: Optional[bool] = None
    """Drop groups whose responses all scored the same (they carry no signal); DAPO's default."""
    max_sampling_rounds: int = 1
    """With dynamic sampling: sample further prompts, up to this many rounds per iteration, until
    ``rl.prompts_per_iteration`` groups with differing scores are in hand (DAPO's resample-to-fill); 1: only drop
    the uninformative groups."""
    overlong_max_len: Optional[int] = None
    """DAPO's soft overlong punishment: responses longer than ``overlong_max_len - overlong_cache`` lose up to 1."""
    overlong_cache: int = 8
    gfpo_keep: Optional[int] = None
    """GFPO: keep the ``gfpo_keep`` shortest responses of each group (default for gfpo: half the group)."""
    tis_cap: Optional[float] = None
    """Truncated importance sampling between the rollout engine and the trainer (a quantised rollout copy):
    each token's loss is weighted by min(p_train_old / p_rollout, tis_cap); None: off."""

    def setting(self, key: str):
        """The config's value of ``key``, or the member's default where it is None."""
        value = getattr(self, key, None)
        if value is not None:
            return value
        if key == "ratio_level":
            return "sequence" if FAMILY[self.name].sequence_ratio else "token"
        return getattr(FAMILY[self.name], key)

    def problems(self) -> Iterator[tuple]:
        from embodied_rl.algorithms.embodied import ALGORITHMS  # the one registry; its algorithms say where they run

        text_names = [n for n in ALGORITHMS.names() if "text" in ALGORITHMS.get(n).worlds]
        if self.name not in text_names:
            yield "name", self.name, ", ".join(text_names) + " (the others run on embodied tasks only)"
            return
        if self.ratio_level is not None and self.ratio_level not in TEXT_RATIO_LEVELS:
            yield "ratio_level", self.ratio_level, ", ".join(TEXT_RATIO_LEVELS)
        if self.max_sampling_rounds < 1 or (self.max_sampling_rounds > 1 and not self.setting("dynamic_sampling")):
            yield ("max_sampling_rounds", self.max_sampling_rounds,
                   "1, or more with dynamic sampling (algorithm.name=dapo or algorithm.dynamic_sampling=true)")
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
    scores = scores.float()
    metrics = {}
    if config.overlong_max_len is not None:
        penalty = overlong_penalty(lengths, config.overlong_max_len, config.overlong_cache)
        scores = scores + penalty
        metrics["reward/overlong_penalty"] = penalty.mean().item()
    adv, keep, family_metrics = group_advantages(scores, lengths, config.group_size, FAMILY[config.name],
                                                 config.setting("dynamic_sampling"), config.gfpo_keep)
    return adv, keep, {**metrics, **family_metrics}


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
                            level=config.setting("ratio_level"), agg=agg)
    metrics.update(pg)
    if config.kl_coef > 0 and ref_logp is not None:
        kl = aggregate_loss(kl_penalty(logp, ref_logp, config.kl_kind), mask, agg)
        total = total + config.kl_coef * kl
        metrics["kl_to_reference"] = kl.item()
    return total, metrics
