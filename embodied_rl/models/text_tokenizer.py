"""Instruction tokenizers for the VLA policies: a byte-level one that needs no download (tiny models, tests), or the
tokenizer saved in a checkpoint directory (``transformers.AutoTokenizer``, local files only)."""

from __future__ import annotations

import numpy as np
import torch

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
BYTE_OFFSET = 3
BYTE_VOCAB_SIZE = BYTE_OFFSET + 256
"""Ids the byte tokenizer uses: pad, bos, eos, then one id per UTF-8 byte."""


class ByteTokenizer:
    """UTF-8 bytes -> ids ``BYTE_OFFSET + byte``; a bos id first. Deterministic, no vocabulary file, any language."""

    pad_id, bos_id, eos_id = PAD_ID, BOS_ID, EOS_ID
    vocab_size = BYTE_VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        return [BOS_ID] + [BYTE_OFFSET + b for b in text.encode("utf-8")]

    def decode(self, ids) -> str:
        return bytes(int(i) - BYTE_OFFSET for i in ids if int(i) >= BYTE_OFFSET).decode("utf-8", errors="replace")


class PretrainedTokenizer:
    """The tokenizer files of a checkpoint directory (local only: nothing is downloaded)."""

    def __init__(self, directory: str):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.vocab_size = len(self.tokenizer)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)


def encode_batch(tokenizer, texts, max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Instructions (a sequence or numpy array of ``B`` strings) -> ids ``[B, L]`` int64 and mask ``[B, L]`` bool,
    right-padded with ``tokenizer.pad_id``, cut at ``max_length`` tokens; ``L`` is the longest kept length (at
    least 1). Identical strings give identical rows, so rollout and training see the same prompt."""
    return right_padded([tokenizer.encode(str(t))[:max_length] for t in np.asarray(texts).reshape(-1)],
                        tokenizer.pad_id)


def right_padded(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists -> ids ``[B, L]`` int64 right-padded with ``pad_id`` and valid mask ``[B, L]`` bool; ``L`` is
    the longest row (at least 1)."""
    length = max(1, max((len(r) for r in rows), default=1))
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), length), dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.as_tensor(row, dtype=torch.long)
        mask[i, :len(row)] = True
    return ids, mask
