"""Micro-batches: a trainer's slice of a minibatch cut into passes whose gradients add up to the slice's own.

A minibatch's loss is an aggregate ``numerator / denominator`` (token-mean: the trained tokens; a sequence mean:
the rows; Dr.GRPO's sum-norm: the longest response). Computed in micro-batches, each pass's loss is its own
aggregate, so pass ``m`` is weighted by ``denominator(m) / denominator(minibatch)`` (``accumulation_weight``) and
the gradients summed over passes are the minibatch's gradient, exactly (up to float addition order). Under data
parallelism the same weight, times the world size, also undoes DDP's/FSDP's averaging over ranks
(``engines/training/data_parallel.py``, "Loss normalisation").

Cutting: rows in their given order, a pass closed when it would exceed ``max_rows`` rows or ``max_tokens`` padded
tokens (its rows x its longest row: what the activations scale with; verl's dynamic batch size by token count). A
row longer than ``max_tokens`` gets a pass of its own. Every rank must run the same number of passes (each one's
forward and backward is collective under FSDP): ``pad_passes`` adds empty passes up to the ranks' largest count,
which the trainer runs on one row at weight 0.
"""

from __future__ import annotations


def micro_batches(rows: list[int], tokens: list[int], max_rows: int | None = None,
                  max_tokens: int | None = None) -> list[list[int]]:
    """``rows`` cut into consecutive passes (lists of row ids), each at most ``max_rows`` rows and ``max_tokens``
    padded tokens; ``tokens[i]`` is row ``rows[i]``'s length in tokens. None: no limit of that kind. ``[]`` for no
    rows."""
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows={max_rows}; allowed: >= 1 or None")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens={max_tokens}; allowed: >= 1 or None")
    if len(rows) != len(tokens):
        raise ValueError(f"{len(rows)} rows but {len(tokens)} token counts")
    passes: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for row, length in zip(rows, tokens):
        wider = max(longest, length)
        too_many = max_rows is not None and len(current) + 1 > max_rows
        too_long = max_tokens is not None and (len(current) + 1) * wider > max_tokens
        if current and (too_many or too_long):
            passes.append(current)
            current, wider = [], length
        current.append(row)
        longest = wider
    if current:
        passes.append(current)
    return passes


def pad_passes(passes: list[list[int]], count: int) -> list[list[int]]:
    """``passes`` followed by empty passes up to ``count`` (the largest count over the data-parallel ranks)."""
    if count < len(passes):
        raise ValueError(f"count={count} is below the {len(passes)} passes already cut")
    return passes + [[] for _ in range(count - len(passes))]


def accumulation_weight(pass_denominator: float, minibatch_denominator: float, world_size: int = 1) -> float:
    """The factor on one pass's aggregated loss that makes the summed (and, over ``world_size`` data-parallel
    ranks, averaged) gradients the whole minibatch's: ``world_size * pass_denominator / minibatch_denominator``;
    0 for an empty pass."""
    if not pass_denominator:
        return 0.0
    return world_size * float(pass_denominator) / float(minibatch_denominator)
