"""Policy and value losses.

Shapes: B sequences (or transitions), L tokens (or action dimensions) per row.
`mask` is 1 for valid tokens and 0 for padding; padded entries of logp may hold
anything (-inf included) and never reach the loss or the metrics.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

RATIO_LEVELS = ("decision", "token", "sequence")
"""Where an importance ratio is taken, in both worlds: 'decision' (one per env step: the product over the factors of
its action), 'token' (one per response token, or per factor of a decision: an OpenVLA action token, a Pi0
coordinate), 'sequence' (one per response or episode: GSPO). On the ``[B, L]`` tensors of ``policy_loss`` a
decision is a row element like a token."""
AGG_MODES = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)
KL_KINDS = ("k1", "k2", "k3")


def _masked_sum(x: torch.Tensor, valid: torch.Tensor, dim=None) -> torch.Tensor:
    # where instead of x * mask: 0 * inf/nan at padded entries would be nan.
    zeroed = torch.where(valid, x, torch.zeros_like(x))
    return zeroed.sum() if dim is None else zeroed.sum(dim=dim)


def _masked_mean(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return _masked_sum(x, valid) / valid.sum().clamp(min=1)


def aggregate_loss(loss: torch.Tensor, mask: torch.Tensor, agg: str) -> torch.Tensor:
    """Reduce a per-token loss `[B, L]` to a scalar.

    agg:
        "token-mean": sum(loss * mask) / sum(mask).
        "seq-mean-token-mean": mean over sequences of each sequence's masked mean.
        "seq-mean-token-sum": mean over sequences of each sequence's masked sum.
        "seq-mean-token-sum-norm": sum(loss * mask) / L with L = mask.shape[-1]
            (Dr.GRPO: a constant normalizer instead of the varying valid length).
    A sequence (or batch) with no valid token contributes 0.
    """
    valid = mask.bool()
    if agg == "token-mean":
        return _masked_mean(loss, valid)
    if agg == "seq-mean-token-mean":
        per_seq = _masked_sum(loss, valid, dim=-1) / valid.sum(dim=-1).clamp(min=1)
        return per_seq.mean()
    if agg == "seq-mean-token-sum":
        return _masked_sum(loss, valid, dim=-1).mean()
    if agg == "seq-mean-token-sum-norm":
        return _masked_sum(loss, valid) / mask.shape[-1]
    raise ValueError(f"unknown agg {agg!r}; allowed: {', '.join(AGG_MODES)}")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip: Optional[float] = None,
    level: str = "token",
    agg: str = "token-mean",
) -> Tuple[torch.Tensor, Dict[str, float]]:
    """Clipped PPO surrogate loss (token-level PPO/GRPO/DAPO, sequence-level GSPO).

    Args:
        logp: `[B, L]` log-probs under the policy being trained (carries grad).
        old_logp: `[B, L]` log-probs under the behaviour policy.
        advantages: `[B]` (broadcast to every token) or `[B, L]`.
        mask: `[B, L]`, 1 for valid tokens.
        clip_low, clip_high: ratio is clipped to [1 - clip_low, 1 + clip_high]
            (asymmetric "clip-higher" when they differ).
        dual_clip: optional c > 1; for A < 0 the loss is capped at c * |A|.
        level: "token" or "decision" -> ratio_t = exp(logp_t - old_logp_t);
            "sequence" (GSPO) -> one ratio per sequence,
            exp(masked mean over tokens of (logp - old_logp)), used for all its tokens.
        agg: see `aggregate_loss`.

    Returns:
        (loss scalar, metrics) with python-float metrics over valid tokens:
        "clip_fraction" (the clipped term was the active one), "dual_clip_fraction",
        "approx_kl" (k3: mean of (ratio - 1) - log ratio, on the ratio used by
        `level`), "ratio_mean".
    """
    if logp.dim() != 2 or old_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(
            f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask "
            f"{tuple(mask.shape)} must all be [B, L]"
        )
    if level not in RATIO_LEVELS:
        raise ValueError(f"unknown level {level!r}; allowed: {', '.join(RATIO_LEVELS)}")
    if agg not in AGG_MODES:
        raise ValueError(f"unknown agg {agg!r}; allowed: {', '.join(AGG_MODES)}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")

    valid = mask.bool()
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    advantages = advantages.to(logp.dtype).expand_as(logp)

    log_ratio = torch.where(valid, logp - old_logp, torch.zeros_like(logp))
    if level == "sequence":
        seq_log_ratio = log_ratio.sum(dim=-1) / valid.sum(dim=-1).clamp(min=1)
        log_ratio = seq_log_ratio[:, None].expand_as(logp)
    ratio = torch.exp(log_ratio)

    unclipped_loss = -ratio * advantages
    clipped_loss = -torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = torch.maximum(unclipped_loss, clipped_loss)
    dual_clipped = torch.zeros_like(valid)
    if dual_clip is not None:
        cap = -dual_clip * advantages
        dual_clipped = (advantages < 0) & (loss > cap)
        loss = torch.where(dual_clipped, cap, loss)

    total = aggregate_loss(loss, mask, agg)

    with torch.no_grad():
        clipped = clipped_loss > unclipped_loss
        metrics = {
            "clip_fraction": _masked_mean(clipped.to(logp.dtype), valid).item(),
            "dual_clip_fraction": _masked_mean(dual_clipped.to(logp.dtype), valid).item(),
            "approx_kl": _masked_mean((ratio - 1.0) - log_ratio, valid).item(),
            "ratio_mean": _masked_mean(ratio, valid).item(),
        }
    return total, metrics


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k1") -> torch.Tensor:
    """Elementwise KL(pi || ref) estimate from sampled log-probs (any shape).

    k1 = logp - ref_logp
    k2 = 0.5 * (logp - ref_logp)^2
    k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1   (unbiased, always >= 0)
    """
    if kind == "k1":
        return logp - ref_logp
    if kind == "k2":
        return 0.5 * (logp - ref_logp) ** 2
    if kind == "k3":
        log_ref_ratio = ref_logp - logp
        return torch.exp(log_ref_ratio) - log_ref_ratio - 1.0
    raise ValueError(f"unknown kl kind {kind!r}; allowed: {', '.join(KL_KINDS)}")


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip: Optional[float] = None,
) -> torch.Tensor:
    """Critic loss, all inputs the same shape (any), scalar output.

    Without clip: 0.5 * mean((values - returns)^2).
    With clip: PPO clipped value loss, values_clipped = old_values +
    clamp(values - old_values, -clip, clip);
    0.5 * mean(max((values - returns)^2, (values_clipped - returns)^2)).
    """
    unclipped = (values - returns) ** 2
    if clip is None:
        return 0.5 * unclipped.mean()
    values_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    clipped = (values_clipped - returns) ** 2
    return 0.5 * torch.maximum(unclipped, clipped).mean()
