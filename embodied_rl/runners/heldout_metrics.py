"""Held-out evaluation figures of a text run from scored responses: accuracy, answer format, truncation and response
lengths of the greedy answers, and for k sampled answers per problem pass@k (any of the k correct), mean@k (the
expected accuracy of one sample) and maj@k (the most frequent extracted answer is correct)."""

from __future__ import annotations

from collections import Counter

import numpy as np


def greedy_summary(rows: dict, answers: list[dict]) -> dict:
    """``rows``: ``correct``, ``formatted`` (bool lists) of the responses ``answers`` (each with ``token_ids`` and
    ``finished``). ``eval/truncated_fraction``: responses cut by ``rollout.max_new_tokens`` before their end."""
    lengths = np.array([len(a["token_ids"]) for a in answers], float)
    return {"eval/heldout_accuracy": float(np.mean(rows["correct"])),
            "eval/heldout_formatted": float(np.mean(rows["formatted"])), "eval/problems": len(answers),
            "eval/truncated_fraction": float(np.mean([not a["finished"] for a in answers])),
            "eval/response_length": float(lengths.mean()), "eval/response_length_std": float(lengths.std())}


def sampled_summary(rows: dict, k: int) -> dict:
    """``rows``: ``correct`` and ``extracted`` (answer text or None) of k consecutive samples per problem."""
    correct = np.asarray(rows["correct"], bool).reshape(-1, k)
    extracted = [rows["extracted"][i:i + k] for i in range(0, len(rows["extracted"]), k)]
    majority = []
    for answers, right in zip(extracted, correct):
        votes = Counter(a for a in answers if a is not None)
        if not votes:
            majority.append(False)
            continue
        top = max(votes.values())
        winner = next(a for a in answers if a is not None and votes[a] == top)  # ties: the first drawn
        majority.append(bool(right[answers.index(winner)]))
    return {f"eval/pass_at_{k}": float(correct.any(axis=1).mean()), f"eval/mean_at_{k}": float(correct.mean()),
            f"eval/maj_at_{k}": float(np.mean(majority))}


def training_lengths(answers: list[dict]) -> dict:
    """Response lengths and truncation of a training iteration's sampled responses."""
    lengths = np.array([len(a["token_ids"]) for a in answers], float)
    return {"train/response_length_std": float(lengths.std()), "train/response_length_max": float(lengths.max()),
            "train/truncated_fraction": float(np.mean([not a["finished"] for a in answers]))}
