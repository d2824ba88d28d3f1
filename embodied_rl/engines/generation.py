"""The generation-engine interface: prompts as token ids in, sampled responses with each token's log-prob out.

Every engine (Hugging Face ``generate``; vLLM and SGLang where installed) returns the log-probs of the
distribution it sampled from (after temperature), so the trainer's recomputation can be compared with them and
corrected for where the two differ (a quantised rollout copy: truncated importance sampling).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 32
    temperature: float = 1.0
    """0: greedy decoding (log-probs are then those of the temperature-1 distribution)."""
    top_p: float = 1.0
    seed: int | None = None
    """Seed of this call's random draws (None: the engine's running generator)."""


@dataclass
class Generation:
    """One response: ``token_ids`` (without the prompt; the end-of-sequence token included when generated),
    ``logprobs`` (one per token, under the sampling distribution), ``finished`` (ended by end-of-sequence rather
    than by ``max_new_tokens``)."""

    token_ids: list[int]
    logprobs: list[float]
    finished: bool


class GenerationEngine(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]: ...

    def load_weights(self, state_dict: dict) -> None:
        """Replace the engine's weights in place (tensors or numpy arrays by parameter name)."""

    def release_memory(self) -> None:
        """Free the engine's own GPU memory between generation turns (a GPU shared with the trainer)."""

    def resume_memory(self) -> None:
        """Take back what ``release_memory`` freed, before the next turn."""
