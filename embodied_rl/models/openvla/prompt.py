"""OpenVLA's prompt tokens and where the image patches go among them.

Reference (openvla/openvla and moojink/openvla-oft, ``prismatic/extern/hf/modeling_prismatic.py``):
``predict_action`` appends Llama-2's empty piece 29871 to the tokenised prompt unless it already ends with it (the
token training saw after ``Out:``), and the forward pass inserts the projected patches right after the first token
(``<s>``, BOS): the LM sees ``[BOS, patches, (OFT: proprio token,) text after BOS, 29871]``. The first action token
is predicted from the hidden state of that last prompt token."""

from __future__ import annotations

import numpy as np
import torch

from embodied_rl.models.text_tokenizer import right_padded


def prompt_token_ids(tokenizer, texts, max_tokens: int, empty_token_id: int | None):
    """Prompts ``[B]`` -> ids ``[B, L]`` int64 and valid mask ``[B, L]`` bool, right-padded with the tokenizer's
    pad id. Each row: the tokenizer's ids (BOS first, as Llama-2's and the byte tokenizer add it) cut at
    ``max_tokens``, then ``empty_token_id`` unless the row already ends with it (None: nothing appended)."""
    rows = []
    for text in np.asarray(texts).reshape(-1):
        ids = list(tokenizer.encode(str(text)))[:max_tokens]
        if empty_token_id is not None and (not ids or ids[-1] != empty_token_id):
            ids.append(int(empty_token_id))
        rows.append(ids)
    return right_padded(rows, tokenizer.pad_id)


def with_patches(text: tuple[torch.Tensor, torch.Tensor],
                 inserted: list[tuple[torch.Tensor, torch.Tensor]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Prismatic's multimodal order: the text part ``(embeds [B, L, W], valid [B, L])`` split after its first
    token, ``inserted`` parts (patches, then OFT's proprio token) between: ``[text[:1], *inserted, text[1:]]``."""
    embeds, valid = text
    return [(embeds[:, :1], valid[:, :1]), *inserted, (embeds[:, 1:], valid[:, 1:])]
