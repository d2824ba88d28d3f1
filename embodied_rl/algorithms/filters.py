"""Sample filters over group-contiguous batches (`[g0 x G, g1 x G, ...]`)."""

from __future__ import annotations

import torch

from .groups import check_groups


def dynamic_sampling_mask(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """DAPO dynamic sampling: `[N]` scores -> bool `[N]`, True for every member of
    a group whose scores are not all identical (such groups carry no GRPO signal)."""
    check_groups(scores, group_size)
    grouped = scores.view(-1, group_size)
    informative = (grouped != grouped[:, :1]).any(dim=1)
    return informative[:, None].expand_as(grouped).reshape(-1)


def gfpo_keep_mask(metric: torch.Tensor, group_size: int, keep: int) -> torch.Tensor:
    """GFPO filtering: `[N]` metric (e.g. response length) -> bool `[N]` keeping,
    in each group, the `keep` members with the smallest metric; ties go to the
    lower index."""
    check_groups(metric, group_size)
    if keep < 1 or keep > group_size:
        raise ValueError(f"keep must be in [1, group_size={group_size}], got {keep}")
    grouped = metric.view(-1, group_size)
    order = torch.argsort(grouped, dim=1, stable=True)
    keep_grouped = torch.zeros_like(grouped, dtype=torch.bool)
    keep_grouped.scatter_(1, order[:, :keep], True)
    return keep_grouped.reshape(-1)
