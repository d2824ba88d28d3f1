"""The trainer's side of a sampled response: each response token's log-prob under the model being trained."""

from __future__ import annotations

import torch


def response_logprobs(model, prompts: list[list[int]], responses: list[list[int]], pad_id: int,
                      temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, mask)``, both ``[B, L]`` (L: the longest response): ``logp[b, j]`` is log p(response_b[j] | prompt_b,
    response_b[:j]) with the logits divided by ``temperature`` (0 or 1: unscaled), as the engine sampled them;
    ``mask`` is 1 on response tokens. Rows are right-padded, so positions count from each prompt's first token, as
    in generation from left-padded prompts."""
    device = next(model.parameters()).device
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    width, longest = max(lengths), max(len(r) for r in responses)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    for row, (prompt, response) in enumerate(zip(prompts, responses)):
        ids[row, :lengths[row]] = torch.tensor(prompt + response)
        attention[row, :lengths[row]] = 1
    logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits.float()  # [B, W, V]
    if temperature not in (0, 1):
        logits = logits / temperature
    logp = torch.zeros(len(prompts), longest, device=device)
    mask = torch.zeros(len(prompts), longest, device=device)
    for row, (prompt, response) in enumerate(zip(prompts, responses)):
        if not response:
            continue
        start = len(prompt) - 1  # the logits at position t predict token t + 1
        rows = torch.log_softmax(logits[row, start:start + len(response)], -1)
        logp[row, :len(response)] = rows.gather(-1, torch.tensor(response, device=device)[:, None]).squeeze(-1)
        mask[row, :len(response)] = 1
    return logp, mask
