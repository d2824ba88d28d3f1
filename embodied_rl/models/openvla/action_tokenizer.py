"""OpenVLA's action tokenizer: continuous actions in [-1, 1] <-> the last 256 ids of the vocabulary, plus the
per-dimension q01/q99 normalisation of actions (OpenVLA's ``norm_stats``). Torch only, no transformers."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from embodied_rl.models.openvla.configuration import N_ACTION_BINS


class ActionTokenizer(nn.Module):
    """Bins and normalisation statistics of ``action_dim`` action dimensions.

    Discretisation (as OpenVLA's ``action_tokenizer.py``): ``bins = linspace(-1, 1, 256)`` (edges), ``centers``
    between consecutive edges (255 of them); a normalised action ``a`` (clipped to [-1, 1]) has
    ``d = digitize(a, bins)`` in 1..256 and token id ``vocab_end - d``: the tokens are the last 256 ids below
    ``vocab_end`` (the tokenizer's vocabulary size). Decoding: ``centers[clip(vocab_end - token - 1, 0, 254)]``; the
    round trip is within half a bin width (``1 / 255``).

    Within the 256 action ids, the *column* ``c = token - (vocab_end - 256)`` (0..255) indexes the restricted
    softmax the policies sample from.

    Normalisation (buffers, in ``state_dict``): ``q01``, ``q99`` ``[A]`` and ``mask`` ``[A]`` bool; an env action
    ``x`` is normalised to ``clip(2 (x - q01) / (q99 - q01) - 1, -1, 1)`` where ``mask`` is true and clipped to
    [-1, 1] where not. Defaults q01 = -1, q99 = 1: ManiSkill's [-1, 1] actions pass through unchanged.
    """

    def __init__(self, action_dim: int, vocab_end: int, n_bins: int = N_ACTION_BINS):
        super().__init__()
        self.action_dim, self.vocab_end, self.n_bins = int(action_dim), int(vocab_end), int(n_bins)
        if self.vocab_end < self.n_bins:
            raise ValueError(f"openvla: a vocabulary of {vocab_end} ids cannot hold {n_bins} action tokens")
        bins = torch.linspace(-1.0, 1.0, self.n_bins, dtype=torch.float64)
        self.register_buffer("bins", bins.float(), persistent=False)
        self.register_buffer("centers", ((bins[:-1] + bins[1:]) / 2).float(), persistent=False)
        self.register_buffer("q01", -torch.ones(self.action_dim))
        self.register_buffer("q99", torch.ones(self.action_dim))
        self.register_buffer("mask", torch.ones(self.action_dim, dtype=torch.bool))

    @property
    def first_id(self) -> int:
        """The first action token id (``vocab_end - 256``)."""
        return self.vocab_end - self.n_bins

    # --- normalisation ------------------------------------------------------------------------------------------
    def set_statistics(self, actions, mask=None) -> None:
        """q01/q99 per dimension from demonstration actions ``[N, A]`` or ``[N, K, A]`` (numpy or torch). ``mask``
        ``[A]`` bool: dimensions to normalise (default: all whose q99 - q01 > 1e-6)."""
        flat = np.asarray(actions.cpu() if torch.is_tensor(actions) else actions, dtype=np.float64)
        flat = flat.reshape(-1, self.action_dim)
        q01, q99 = np.quantile(flat, 0.01, axis=0), np.quantile(flat, 0.99, axis=0)
        keep = (q99 - q01) > 1e-6 if mask is None else np.asarray(mask, dtype=bool)
        self.q01.copy_(torch.as_tensor(np.where(keep, q01, -1.0), dtype=torch.float32))
        self.q99.copy_(torch.as_tensor(np.where(keep, q99, 1.0), dtype=torch.float32))
        self.mask.copy_(torch.as_tensor(keep))

    def normalize(self, actions: torch.Tensor) -> torch.Tensor:
        """Env actions ``[..., A]`` -> normalised ``[..., A]`` in [-1, 1]."""
        actions = actions.float()
        scaled = 2 * (actions - self.q01) / (self.q99 - self.q01 + 1e-8) - 1
        return torch.where(self.mask, scaled, actions).clamp(-1.0, 1.0)

    def unnormalize(self, normalized: torch.Tensor) -> torch.Tensor:
        """Normalised ``[..., A]`` in [-1, 1] -> env actions ``[..., A]``."""
        scaled = 0.5 * (normalized + 1) * (self.q99 - self.q01) + self.q01
        return torch.where(self.mask, scaled, normalized)

    # --- bins <-> tokens ----------------------------------------------------------------------------------------
    def columns(self, normalized: torch.Tensor) -> torch.Tensor:
        """Normalised actions ``[...]`` in [-1, 1] -> columns ``[...]`` int64 in 0..255 (``token - first_id``)."""
        digitized = torch.bucketize(normalized.float().clamp(-1.0, 1.0).contiguous(), self.bins, right=True)
        return self.n_bins - digitized  # d in 1..256 -> token vocab_end - d -> column 256 - d

    def tokens(self, normalized: torch.Tensor) -> torch.Tensor:
        """Normalised actions ``[...]`` -> token ids ``[...]`` int64 (the last 256 ids below ``vocab_end``)."""
        return self.columns(normalized) + self.first_id

    def decode_columns(self, columns: torch.Tensor) -> torch.Tensor:
        """Columns ``[...]`` int64 -> normalised actions ``[...]`` float32 (bin centers)."""
        digitized = self.n_bins - columns
        return self.centers[(digitized - 1).clamp(0, self.n_bins - 2)]

    def decode_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids ``[...]`` -> normalised actions ``[...]`` float32 (bin centers)."""
        return self.decode_columns(tokens - self.first_id)

    def encode_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Env actions ``[B, A]`` or ``[B, K, A]`` -> columns ``[B, K * A]`` int64 (normalise, digitise)."""
        return self.columns(self.normalize(actions)).reshape(len(actions), -1)

    def decode_actions(self, columns: torch.Tensor, chunk: int) -> torch.Tensor:
        """Columns ``[B, K * A]`` -> env actions ``[B, K, A]`` float32."""
        normalized = self.decode_columns(columns).reshape(len(columns), chunk, self.action_dim)
        return self.unnormalize(normalized)
