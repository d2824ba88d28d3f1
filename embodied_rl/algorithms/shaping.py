"""Reward shaping terms."""

from __future__ import annotations

import torch


def overlong_penalty(lengths: torch.Tensor, max_len: int, cache_len: int) -> torch.Tensor:
    """DAPO soft overlong punishment, added to the task reward.

    Args:
        lengths: `[B]` response lengths (int or float).
        max_len: maximum allowed length.
        cache_len: width of the soft-penalty window just below max_len (> 0).

    Returns:
        `[B]` float:
            0                                             if length <= max_len - cache_len
            (max_len - cache_len - length) / cache_len    if max_len - cache_len < length <= max_len
            -1                                            if length > max_len
    """
    if cache_len <= 0 or cache_len > max_len:
        raise ValueError(f"cache_len must be in (0, max_len={max_len}], got {cache_len}")
    lengths = lengths.float() if not lengths.is_floating_point() else lengths
    soft_start = max_len - cache_len
    penalty = (soft_start - lengths) / cache_len
    penalty = torch.where(lengths <= soft_start, torch.zeros_like(penalty), penalty)
    return torch.where(lengths > max_len, torch.full_like(penalty, -1.0), penalty)
