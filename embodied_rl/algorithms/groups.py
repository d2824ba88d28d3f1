"""Shape checks shared by everything that works on group-contiguous batches (``[g0 x G, g1 x G, ...]``)."""

from __future__ import annotations

import torch


def check_groups(x: torch.Tensor, group_size: int) -> None:
    """Raise ValueError unless ``x`` is ``[N]`` with N a multiple of ``group_size`` >= 1."""
    if x.dim() != 1:
        raise ValueError(f"expected a 1-D [N] tensor, got shape {tuple(x.shape)}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if x.numel() % group_size != 0:
        raise ValueError(f"number of samples ({x.numel()}) is not a multiple of group_size ({group_size})")
