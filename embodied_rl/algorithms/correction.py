"""Off-policy correction between the rollout engine and the trainer."""

from __future__ import annotations

import torch


def truncated_is_weights(
    train_logp: torch.Tensor, rollout_logp: torch.Tensor, cap: float
) -> torch.Tensor:
    """Truncated importance-sampling weights for rollout/trainer mismatch.

    Args:
        train_logp: `[B, L]` log-probs recomputed by the trainer.
        rollout_logp: `[B, L]` log-probs reported by the rollout engine.
        cap: upper bound on a weight.

    Returns:
        `[B, L]` min(exp(train_logp - rollout_logp), cap), detached: the weights
        rescale the loss but must not be differentiated through.
    """
    with torch.no_grad():
        return torch.exp(train_logp - rollout_logp).clamp(max=cap)
