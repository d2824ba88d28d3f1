"""A minibatch's loss and gradient computed by the data-parallel ranks of one actor (``actor.backend=fsdp``), each
on its contiguous slice of the rows, with the same gradient as one process computing the whole minibatch.

Every rank holds the whole minibatch. Each evaluates the policy on its own rows (``engine.shard``), in micro-batches
of ``micro_batch_size`` rows if set, and the per-row outputs (``[n_r]`` log-probs, values, ``[n_r, M]`` token
log-probs) are gathered to every rank; every rank then computes the loss of the whole minibatch on them (identical
everywhere: PPO's advantage normalisation, GSPO's per-episode ratios and target_kl see the whole minibatch) and its
gradient with respect to the outputs, and back-propagates its own rows' slice of that gradient, times
``world_size``, into the parameters. FSDP averages the ranks' gradients, so the sum over ranks divided by
``world_size`` is exactly the whole minibatch's gradient (the chain rule through the per-row outputs). With one
pass per rank the graph of that pass is kept (no second forward); with several micro-batches each is evaluated
twice, first without gradients, as in ``micro_batches.py``. Scalar outputs (SFT's mean over rows) are weighted by
their rows' share of the minibatch instead.

Every rank runs the same number of forwards and backwards (FSDP's all-gathers and reduce-scatters are collective):
the number of passes is set by the largest slice, and a pass with no rows of its own evaluates one row and
back-propagates zeros.
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


def sharded_minibatch_loss(evaluate: Callable[[dict], dict], loss: Callable[[dict, dict], tuple], minibatch: dict,
                           rows: int, micro_batch_size: int | None, engine,
                           scale: float = 1.0) -> tuple[torch.Tensor, dict, Callable[[], None]]:
    """``(loss value, metrics, backward)`` of ``minibatch`` (``rows`` rows, the same on every rank of ``engine``, a
    distributed ``DataParallelEngine``), as ``micro_batches.minibatch_loss`` gives them for one process; value and
    metrics are the whole minibatch's on every rank. ``backward()`` accumulates this rank's share (FSDP averages)."""
    counts = engine.row_counts(rows)
    passes = rank_passes(rows, counts, engine.rank, micro_batch_size)
    world = engine.world_size

    def part_rows(part: slice) -> dict:  # an empty pass evaluates row 0 (its gradient is zeroed)
        return select_rows(minibatch, part if part.stop > part.start else slice(0, 1))

    keep_graph = len(passes) == 1
    with torch.set_grad_enabled(keep_graph):
        outputs = [evaluate(part_rows(part)) for part in passes]
    if any(v.dim() == 0 for v in outputs[0].values()):
        return _weighted_mean(evaluate, loss, part_rows, passes, outputs, rows, engine, scale, keep_graph)
    names = [k for k, v in outputs[0].items() if v.is_floating_point()]
    local = {k: torch.cat([o[k][:p.stop - p.start] for o, p in zip(outputs, passes)]).detach() for k in outputs[0]}
    leaves = {k: engine.all_gather_rows(v, counts).requires_grad_(k in names) for k, v in local.items()}
    value, metrics = loss(leaves, minibatch)

    def backward() -> None:
        grads = dict(zip(names, torch.autograd.grad(value * scale, [leaves[k] for k in names], allow_unused=True)))
        for part, out in zip(passes, outputs):
            if not keep_graph:
                out = evaluate(part_rows(part))
            pairs = []
            for k in names:
                if not out[k].requires_grad:
                    continue
                grad = torch.zeros_like(out[k]) if grads[k] is None or part.stop == part.start else \
                    grads[k][part] * world
                pairs.append((out[k], grad))
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])

    return value.detach(), metrics, backward


def _weighted_mean(evaluate, loss, part_rows, passes: list[slice], outputs: list[dict], rows: int, engine,
                   scale: float, keep_graph: bool):
    """Scalar outputs (a mean over rows): the minibatch's loss and metrics as the row-weighted sum of every rank's
    passes' (one all-reduce); ``backward`` weights each pass's loss by its share of the minibatch, times
    ``world_size`` (FSDP averages)."""
    weights = [(part.stop - part.start) / rows for part in passes]
    losses, names, sums = [], None, None
    for w, part, out in zip(weights, passes, outputs):
        value, part_metrics = loss(out, part_rows(part))
        losses.append(value)
        names = sorted(part_metrics) if names is None else names
        row = [w * float(value.detach())] + [w * float(part_metrics[k]) for k in names]
        sums = row if sums is None else [a + b for a, b in zip(sums, row)]
    total, *metric_values = engine.all_reduce_sum(sums)
    world = engine.world_size

    def backward() -> None:
        for w, part, value in zip(weights, passes, losses):
            if not keep_graph:
                value = loss(evaluate(part_rows(part)), part_rows(part))[0]
            (w * world * scale * value).backward()

    return torch.tensor(total), dict(zip(names, metric_values)), backward
