"""The trainer's side of a sampled response: each response token's log-prob under the model being trained.

Hugging Face models are scored without full-vocabulary logits: the decoder's final hidden state (only the last
layer's, taken by a forward hook on the decoder: ``output_hidden_states`` would keep every layer's) of the response
positions goes through the output layer in chunks of ``CHUNK_TOKENS`` tokens, each chunk's float32 log-softmax
recomputed in the backward pass (activation checkpointing) instead of kept, so no ``[B, T, V]`` tensor exists (V is
~152k for Qwen: 2.4 GB per 4k tokens in float32). The model may be wrapped (DDP's ``module``, FSDP2's class swap):
the forward still runs through the wrapper, so its gradient hooks fire. Other models (Megatron's) give their logits
and are scored from them."""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

CHUNK_TOKENS = 1024
"""Response tokens per output-layer chunk: at most ``CHUNK_TOKENS x V`` float32 logits exist at a time."""


def response_logprobs(model, prompts: list[list[int]], responses: list[list[int]], pad_id: int,
                      temperature: float = 1.0, full_logits: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, mask)``, both ``[B, L]`` (L: the longest response): ``logp[b, j]`` is log p(response_b[j] | prompt_b,
    response_b[:j]) with the logits divided by ``temperature`` (0 or 1: unscaled), as the engine sampled them;
    ``mask`` is 1 on response tokens. Rows are right-padded, so positions count from each prompt's first token, as
    in generation from left-padded prompts. ``full_logits``: score from the model's logits even where it has an
    output layer (the reference the chunked path is checked against)."""
    device = next(model.parameters()).device
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    width, longest = max(lengths), max(len(r) for r in responses)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    for row, (prompt, response) in enumerate(zip(prompts, responses)):
        ids[row, :lengths[row]] = torch.tensor(prompt + response)
        attention[row, :lengths[row]] = 1
    scale = 1.0 if temperature in (0, 1) else float(temperature)
    # the positions whose output predicts each response token (the logits at t predict token t + 1)
    rows = torch.tensor([row for row, r in enumerate(responses) for _ in r], dtype=torch.long)
    columns = torch.tensor([j for r in responses for j in range(len(r))], dtype=torch.long)
    positions = torch.tensor([len(p) - 1 + j for p, r in zip(prompts, responses) for j in range(len(r))],
                             dtype=torch.long)
    targets = torch.tensor([t for r in responses for t in r], dtype=torch.long, device=device)
    inner = getattr(model, "module", model)  # DDP keeps the model as .module
    head = None if full_logits or not hasattr(inner, "get_decoder") else inner.get_output_embeddings()
    if head is not None:
        hidden = _last_hidden_state(model, inner.get_decoder(), ids.to(device), attention.to(device))  # [B, W, H]
        hidden = hidden[rows.to(device), positions.to(device)]  # [N, H], N response tokens
        chosen = _chunked_logprobs(head, hidden, targets, scale)
    else:
        logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits  # [B, W, V]
        picked = logits[rows.to(device), positions.to(device)].float() / scale
        chosen = torch.log_softmax(picked, -1).gather(-1, targets[:, None]).squeeze(-1)
    logp = torch.zeros(len(prompts), longest, device=device, dtype=chosen.dtype)
    logp = logp.index_put((rows.to(device), columns.to(device)), chosen)
    mask = torch.zeros(len(prompts), longest, device=device)
    mask[rows.to(device), columns.to(device)] = 1
    return logp, mask


def _last_hidden_state(model, decoder, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """``[B, W, H]``: the decoder's output (after its final norm) of a forward of ``model`` (the output layer sees
    the last position only)."""
    captured = []

    def keep(module, args, output):
        captured.append(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])

    handle = decoder.register_forward_hook(keep)
    try:
        model(input_ids=ids, attention_mask=attention, logits_to_keep=1, use_cache=False)
    finally:
        handle.remove()
    return captured[-1]


def _token_logprobs(head, hidden: torch.Tensor, targets: torch.Tensor, scale: float) -> torch.Tensor:
    """``[n]`` log-probs of ``targets`` ``[n]`` from final hidden states ``[n, H]``: float32 log-softmax."""
    logits = head(hidden).float() / scale  # [n, V]
    return torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)


def _chunked_logprobs(head, hidden: torch.Tensor, targets: torch.Tensor, scale: float) -> torch.Tensor:
    parts = []
    for start in range(0, len(targets), CHUNK_TOKENS):
        piece = slice(start, start + CHUNK_TOKENS)
        if torch.is_grad_enabled():
            parts.append(checkpoint(_token_logprobs, head, hidden[piece], targets[piece], scale, use_reentrant=False))
        else:
            parts.append(_token_logprobs(head, hidden[piece], targets[piece], scale))
    return torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.float32)
