"""What the LM trainer computes over its rows besides the model: trained-token counts, padded loss masks, the
loss aggregation's denominator (the weight of a micro-batch or a data-parallel slice), and switching on activation
checkpointing of a Hugging Face model's decoder layers."""

from __future__ import annotations

import torch


def enable_activation_checkpointing(model: torch.nn.Module) -> None:
    """Recompute ``model``'s decoder layers in the backward pass (non-reentrant: works under autocast, with frozen
    inputs and with LoRA) instead of keeping their activations."""
    options = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # the name in newer transformers
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=options)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=options)


def trained_tokens(loss_mask: list[list[int]], lengths: torch.Tensor) -> torch.Tensor:
    """``[N]`` trained tokens per response from ``loss_mask`` (N lists of 0/1, each as long as its response)."""
    for i, (row, length) in enumerate(zip(loss_mask, lengths.tolist())):
        if len(row) != length or any(v not in (0, 1) for v in row):
            raise ValueError(f"loss_mask[{i}] must hold one 0 or 1 per response token ({length}), got {row}")
    if len(loss_mask) != len(lengths):
        raise ValueError(f"loss_mask has {len(loss_mask)} rows for {len(lengths)} responses")
    return torch.tensor([sum(row) for row in loss_mask])


def token_mask(loss_mask: list[list[int]], width: int) -> torch.Tensor:
    """``[B, width]`` float: ``loss_mask`` rows right-padded with 0 (cut to ``width``)."""
    mask = torch.zeros(len(loss_mask), width)
    for row, values in enumerate(loss_mask):
        mask[row, :min(len(values), width)] = torch.tensor(values[:width], dtype=torch.float)
    return mask


def aggregation_denominator(agg: str, tokens: list[int], lengths: list[int]) -> float:
    """What ``algorithms.losses.aggregate_loss(agg)`` divides a minibatch's loss by, for rows with ``tokens``
    trained tokens and ``lengths`` response tokens each: the trained tokens (token-mean), the rows (the sequence
    means) or the padded width, the longest response (seq-mean-token-sum-norm). 0 for no rows."""
    if not tokens:
        return 0.0
    if agg == "token-mean":
        return float(sum(tokens))
    if agg == "seq-mean-token-sum-norm":
        return float(max(lengths))
    return float(len(tokens))
