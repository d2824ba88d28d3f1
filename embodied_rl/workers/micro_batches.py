"""A minibatch's loss and gradient computed in passes over parts of its rows (micro-batches with gradient
accumulation, and the slices of a sharded actor's ranks), with the same gradient as the whole minibatch in one
forward.

Losses normalise over the whole minibatch (PPO's advantage normalisation, GSPO's sequence ratios, token means), so
summing the parts' losses would change them. Instead: (1) the policy's per-row outputs of every pass (``[n]``
log-probs, values, ``[n, M]`` token log-probs), without gradients where there are several passes; (2) those of every
rank gathered, and the loss of the whole minibatch on them as leaves, and its gradient with respect to them (small);
(3) each pass again with gradients (or its kept graph when it is the only one), back-propagating its rows' slice of
(2) into the parameters, times ``world_size`` where FSDP averages the ranks' gradients. The gradient is exactly the
whole minibatch's (the chain rule through the per-row outputs), and the loss and metrics are the whole minibatch's
on every rank (``target_kl`` decides alike). A loss of scalar outputs (SFT's mean over rows) is instead the mean of
the passes' losses weighted by their rows.

Sharded (``engine``, a distributed ``DataParallelEngine``): every rank holds the whole minibatch and runs the same
number of forwards and backwards (FSDP's all-gathers and reduce-scatters are collective): the number of passes is
set by the largest slice, and a pass with no rows of its own evaluates one row and back-propagates zeros.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from embodied_rl.algorithms.embodied.base import select_rows


def rank_passes(rows: int, counts: list[int], rank: int, micro_batch_size: int | None) -> list[slice]:
    """Rank ``rank``'s rows of a minibatch of ``rows`` (``counts`` per rank, contiguous in rank order) as the same
    number of contiguous passes on every rank: ``ceil(max(counts) / micro_batch_size)`` (1 without micro-batches),
    as even as they come; a pass may be empty (``slice(s, s)``)."""
    passes = max(1, math.ceil(max(counts) / micro_batch_size)) if micro_batch_size else 1
    start, count = sum(counts[:rank]), counts[rank]
    size, extra = divmod(count, passes)
    bounds, at = [], start
    for i in range(passes):
        width = size + (i < extra)
        bounds.append(slice(at, at + width))
        at += width
    return bounds


def minibatch_loss(evaluate: Callable[[dict], dict], loss: Callable[[dict, dict], tuple], minibatch: dict,
                   rows: int, micro_batch_size: int | None, scale: float = 1.0,
                   engine=None) -> tuple[torch.Tensor, dict, Callable[[], None]]:
    """``(loss value, metrics, backward)``: ``evaluate(rows) -> outputs`` (tensors ``[n, ...]``, or scalars) and
    ``loss(outputs, rows) -> (scalar, metrics)`` over ``minibatch`` (``rows`` rows); ``backward()`` accumulates
    the minibatch's gradient, times ``scale`` (fp16 loss scaling), into the parameters' ``.grad`` (a sharded rank:
    its share, which FSDP averages). The value and metrics are known before ``backward`` runs (an update may stop
    on them first). ``engine``: a distributed ``DataParallelEngine`` whose ranks each compute their slice; None for
    one process."""
    world = engine.world_size if engine is not None and engine.distributed else 1
    counts = engine.row_counts(rows) if world > 1 else [rows]
    passes = rank_passes(rows, counts, engine.rank if world > 1 else 0, micro_batch_size)
    if world == 1 and len(passes) == 1:
        value, metrics = loss(evaluate(minibatch), minibatch)
        return value, metrics, (value * scale).backward

    def part_rows(part: slice) -> dict:  # an empty pass evaluates row 0 (its gradient is zeroed)
        return select_rows(minibatch, part if part.stop > part.start else slice(0, 1))

    keep_graph = len(passes) == 1
    with torch.set_grad_enabled(keep_graph):
        outputs = [evaluate(part_rows(part)) for part in passes]
    if any(v.dim() == 0 for v in outputs[0].values()):
        return _weighted_mean(evaluate, loss, part_rows, passes, outputs, rows, engine, world, scale, keep_graph)
    names = [k for k, v in outputs[0].items() if v.is_floating_point()]
    local = {k: torch.cat([o[k][:p.stop - p.start] for o, p in zip(outputs, passes)]).detach() for k in outputs[0]}
    if world > 1:
        local = {k: engine.all_gather_rows(v, counts) for k, v in local.items()}
    leaves = {k: v.requires_grad_(k in names) for k, v in local.items()}
    value, metrics = loss(leaves, minibatch)

    def backward() -> None:
        grads = dict(zip(names, torch.autograd.grad(value * scale, [leaves[k] for k in names], allow_unused=True)))
        for part, out in zip(passes, outputs):
            if not keep_graph:
                out = evaluate(part_rows(part))
            pairs = []
            for k in names:
                if grads[k] is None or not out[k].requires_grad:  # an output the loss does not use
                    continue
                empty = part.stop == part.start  # the pass of a rank without rows of its own: zeros
                pairs.append((out[k], torch.zeros_like(out[k]) if empty else grads[k][part] * world))
            if pairs:
                torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])

    return value.detach(), metrics, backward


def _weighted_mean(evaluate, loss, part_rows, passes: list[slice], outputs: list[dict], rows: int, engine,
                   world: int, scale: float, keep_graph: bool):
    """Scalar outputs (a mean over rows): the minibatch's loss and metrics as the row-weighted sum of every pass's
    (summed over ranks: one all-reduce); ``backward`` weights each pass's loss by its share of the minibatch, times
    ``world`` (FSDP averages)."""
    weights = [(part.stop - part.start) / rows for part in passes]
    losses, names, sums = [], None, None
    for w, part, out in zip(weights, passes, outputs):
        value, part_metrics = loss(out, part_rows(part))
        losses.append(value)
        names = sorted(part_metrics) if names is None else names
        row = [w * float(value.detach())] + [w * float(part_metrics[k]) for k in names]
        sums = row if sums is None else [a + b for a, b in zip(sums, row)]
    total, *metric_values = engine.all_reduce_sum(sums) if world > 1 else sums

    def backward() -> None:
        for w, part, value in zip(weights, passes, losses):
            if not keep_graph:
                value = loss(evaluate(part_rows(part)), part_rows(part))[0]
            (w * world * scale * value).backward()

    return torch.tensor(total), dict(zip(names, metric_values)), backward
