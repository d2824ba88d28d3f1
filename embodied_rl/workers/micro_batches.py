"""A minibatch's loss and gradient computed in micro-batches (gradient accumulation) so that only one micro-batch's
activations are alive at a time, with the same gradient as the whole minibatch in one forward.

Losses normalise over the whole minibatch (PPO's advantage normalisation, GSPO's sequence ratios, token means), so
summing micro-batch losses would change them. Instead: (1) the policy's per-row outputs of every micro-batch under
``no_grad``; (2) the loss of the whole minibatch on those outputs as leaves, and its gradient with respect to them
(small: ``[n]`` or ``[n, M]``); (3) each micro-batch again with gradients, back-propagating its slice of (2) into the
parameters. The gradient is exactly the whole minibatch's (the chain rule through the per-row outputs) for one
extra forward pass without activations. A loss of scalar outputs (SFT's mean over rows) is instead the mean of its
micro-batches' losses weighted by their rows.
"""

from __future__ import annotations

from typing import Callable

import torch

from embodied_rl.algorithms.embodied.base import select_rows


def micro_slices(rows: int, micro_batch_size: int | None) -> list[slice]:
    """``[0, rows)`` in consecutive slices of ``micro_batch_size`` (the last may be shorter); one slice for None."""
    size = rows if not micro_batch_size else int(micro_batch_size)
    return [slice(start, min(start + size, rows)) for start in range(0, rows, size)]


def minibatch_loss(evaluate: Callable[[dict], dict], loss: Callable[[dict, dict], tuple], minibatch: dict,
                   rows: int, micro_batch_size: int | None,
                   scale: float = 1.0) -> tuple[torch.Tensor, dict, Callable[[], None]]:
    """``(loss value, metrics, backward)``: ``evaluate(rows) -> outputs`` (tensors ``[n, ...]``, or scalars) and
    ``loss(outputs, rows) -> (scalar, metrics)`` over ``minibatch`` (``rows`` rows); ``backward()`` accumulates
    the minibatch's gradient, times ``scale`` (fp16 loss scaling), into the parameters' ``.grad``. The value and
    metrics are known before ``backward`` runs (an update may stop on them first)."""
    parts = micro_slices(rows, micro_batch_size)
    if len(parts) == 1:
        value, metrics = loss(evaluate(minibatch), minibatch)
        return value, metrics, (value * scale).backward
    with torch.no_grad():
        outputs = [evaluate(select_rows(minibatch, part)) for part in parts]
    if any(v.dim() == 0 for v in outputs[0].values()):
        return _weighted_mean(evaluate, loss, minibatch, parts, outputs, rows, scale)
    names = [k for k, v in outputs[0].items() if v.is_floating_point()]
    leaves = {k: torch.cat([o[k] for o in outputs]).detach().requires_grad_(k in names) for k in outputs[0]}
    value, metrics = loss(leaves, minibatch)

    def backward() -> None:
        grads = dict(zip(names, torch.autograd.grad(value * scale, [leaves[k] for k in names], allow_unused=True)))
        for part in parts:
            out = evaluate(select_rows(minibatch, part))
            pairs = [(out[k], grads[k][part]) for k in names if grads[k] is not None and out[k].requires_grad]
            if pairs:
                torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])

    return value.detach(), metrics, backward


def _weighted_mean(evaluate, loss, minibatch: dict, parts: list[slice], outputs: list[dict], rows: int,
                   scale: float):
    """Scalar outputs (a mean over rows): the minibatch's loss and metrics as the row-weighted mean of its
    micro-batches'; ``backward`` weights each micro-batch's loss by its share of the rows."""
    weights = [(part.stop - part.start) / rows for part in parts]
    values, metrics = [], {}
    for w, part, out in zip(weights, parts, outputs):
        value, part_metrics = loss(out, select_rows(minibatch, part))
        values.append(w * value)
        for k, v in part_metrics.items():
            metrics[k] = metrics.get(k, 0.0) + w * v

    def backward() -> None:
        for w, part in zip(weights, parts):
            rows_part = select_rows(minibatch, part)
            (w * scale * loss(evaluate(rows_part), rows_part)[0]).backward()

    return torch.stack(values).sum(), metrics, backward
