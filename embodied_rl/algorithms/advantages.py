"""Advantage estimators.

Two families:

* `gae`: per-step advantages for environment rollouts laid out `[T, B]`
  (T time steps, B parallel envs).
* group/batch estimators (`grpo`, `dr_grpo`, `rloo`, `reinforce_pp`), registered in
  `ADVANTAGE_ESTIMATORS` with one signature `(scores [N], group_size) -> [N]`: one scalar
  score per sampled response or episode, laid out group-contiguous:
  `[g0 x G, g1 x G, ...]` with G = `group_size`. `group_family` dispatches on them.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from .groups import check_groups
from .registry import ADVANTAGE_ESTIMATORS


def _as_float(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_floating_point() else x.float()


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float,
    lam: float,
    truncated: Optional[torch.Tensor] = None,
    final_values: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation with time-limit bootstrapping.

    Args:
        rewards: `[T, B]` reward r_t received after step t.
        values: `[T, B]` V(s_t).
        dones: `[T, B]` bool or float; the episode ended after step t
            (terminated OR truncated). Cuts both bootstrapping from values[t+1]
            and the advantage recursion.
        next_value: `[B]` V(s_T), the value of the observation after the last step.
        gamma: discount.
        lam: GAE lambda.
        truncated: optional `[T, B]` bool; the episode was cut by a time limit at
            step t (must imply dones[t]).
        final_values: optional `[T, B]`; V(final observation) of the episode
            truncated at step t. Only read where `truncated` is set (other entries
            may hold anything, NaN included).

    Returns:
        (advantages, returns), both `[T, B]` float, returns = advantages + values.

    delta_t = r_t + gamma * V_next_t * (1 - done_t) + gamma * final_value_t * truncated_t - V_t
    A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [T, B], got shape {tuple(rewards.shape)}")
    if values.shape != rewards.shape or dones.shape != rewards.shape:
        raise ValueError(
            f"rewards {tuple(rewards.shape)}, values {tuple(values.shape)} and "
            f"dones {tuple(dones.shape)} must have the same [T, B] shape"
        )
    if next_value.shape != rewards.shape[1:]:
        raise ValueError(
            f"next_value must be [B]={tuple(rewards.shape[1:])}, got {tuple(next_value.shape)}"
        )
    if (truncated is None) != (final_values is None):
        raise ValueError("truncated and final_values must be given together")

    rewards = _as_float(rewards)
    values = _as_float(values)
    not_done = 1.0 - _as_float(dones).to(values.dtype)
    next_values = torch.cat([values[1:], _as_float(next_value).to(values.dtype)[None]], dim=0)

    deltas = rewards + gamma * next_values * not_done - values
    if truncated is not None:
        truncated = truncated.bool()
        # torch.where rather than multiplication so NaN/garbage in unread entries
        # of final_values cannot leak in.
        bootstrap = torch.where(
            truncated, _as_float(final_values).to(values.dtype), torch.zeros_like(values)
        )
        deltas = deltas + gamma * bootstrap

    advantages = torch.empty_like(values)
    running = torch.zeros_like(values[0])
    # The recursion is sequential in time; it is vectorized over envs.
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + values


def _grouped(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """`[N]` group-contiguous scores -> `[N // G, G]` float view."""
    check_groups(scores, group_size)
    return _as_float(scores).view(-1, group_size)


def _std_or_zero(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Unbiased std along `dim`; 0 where it is undefined (a single element)."""
    if x.shape[dim] < 2:
        return torch.zeros_like(x.mean(dim=dim, keepdim=True))
    return x.std(dim=dim, keepdim=True)


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo_advantages(
    scores: torch.Tensor, group_size: int, normalize_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO group-relative advantages.

    Args:
        scores: `[N]` group-contiguous, N a multiple of `group_size`.
        group_size: G, samples per prompt.
        normalize_std: divide by (group std + eps); the std is the UNBIASED one
            (torch default, divides by G - 1). With G == 1 the std is taken as 0.
        eps: added to the std.

    Returns:
        `[N]` float: (score - group mean) [/ (group std + eps)]. A group whose
        scores are all identical gets 0.
    """
    grouped = _grouped(scores, group_size)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    if normalize_std:
        centered = centered / (_std_or_zero(grouped, dim=1) + eps)
    return centered.reshape(-1)


@ADVANTAGE_ESTIMATORS.register("dr_grpo")
def dr_grpo_advantages(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr.GRPO: `[N]` scores -> `[N]` score - group mean (no std normalization)."""
    return grpo_advantages(scores, group_size, normalize_std=False)


@ADVANTAGE_ESTIMATORS.register("rloo")
def rloo_advantages(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """REINFORCE leave-one-out: `[N]` -> `[N]`, score_i - mean of the other G - 1
    scores of its group. Requires group_size >= 2."""
    if group_size < 2:
        raise ValueError(f"rloo needs group_size >= 2, got {group_size}")
    grouped = _grouped(scores, group_size)
    others_mean = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
    return (grouped - others_mean).reshape(-1)


@ADVANTAGE_ESTIMATORS.register("reinforce_pp")
def reinforce_plus_plus_advantages(scores: torch.Tensor, group_size: int = 1, eps: float = 1e-6) -> torch.Tensor:
    """REINFORCE++: `[N]` scores normalized over the whole batch,
    (s - mean) / (std + eps) with the unbiased std (0 when N == 1). `group_size` is taken for the
    registry's one signature and not used: the batch is one group."""
    if scores.dim() != 1:
        raise ValueError(f"scores must be 1-D [N], got shape {tuple(scores.shape)}")
    scores = _as_float(scores)
    return (scores - scores.mean()) / (_std_or_zero(scores, dim=0) + eps)


def kept_group_advantages(scores: torch.Tensor, keep: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """GFPO: GRPO advantages among the kept members of each group. `scores` `[N]` and `keep` `[N]` bool,
    group-contiguous -> `[N]`: (s - mean of the kept) / (unbiased std of the kept + eps) for the kept, 0 for
    the others (a group with one kept member gets 0)."""
    grouped, kept = _grouped(scores, group_size), keep.view(-1, group_size).to(torch.float32)
    count = kept.sum(1, keepdim=True)
    mean = (grouped * kept).sum(1, keepdim=True) / count.clamp(min=1)
    var = (((grouped - mean) * kept) ** 2).sum(1, keepdim=True) / (count - 1).clamp(min=1)
    return ((grouped - mean) / (var.sqrt() + eps) * kept).reshape(-1)
