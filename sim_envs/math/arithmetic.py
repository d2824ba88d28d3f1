"""A synthetic arithmetic problem set generated in code, so reasoning runs need no download.

Problems are ``a op b`` (and ``a op b op c`` at ``terms=3``) over non-negative integers below ``10 ** digits``.
Every problem belongs to exactly one split, decided by a hash of its text: about ``heldout_share`` of all possible
problems are held out, and no held-out problem is ever generated for training (however many are drawn).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from sim_envs.math.calculator import calculate, format_number

OPERATORS = ("+", "-", "*")
SPLITS = ("train", "heldout")


@dataclass(frozen=True)
class Problem:
    """One problem: ``question`` (e.g. ``"23+45"``), its exact ``answer`` as text (``"68"``)."""

    question: str
    answer: str


def split_of(question: str, heldout_share: float = 0.1) -> str:
    """``"heldout"`` for about ``heldout_share`` of all questions (a stable hash of the text), else ``"train"``."""
    bucket = int.from_bytes(hashlib.sha256(question.encode()).digest()[:4], "big") / 2 ** 32
    return "heldout" if bucket < heldout_share else "train"


def generate(count: int, split: str = "train", seed: int = 0, digits: int = 2, terms: int = 2,
             operators: tuple[str, ...] = OPERATORS, heldout_share: float = 0.1) -> list[Problem]:
    """``count`` distinct problems of ``split``, the same list for the same arguments."""
    if not 1 <= digits <= 6 or terms not in (2, 3) or not operators or set(operators) - set(OPERATORS):
        raise ValueError(f"digits={digits} (1-6), terms={terms} (2 or 3), operators={operators} ({OPERATORS})")
    return draw_problems(count, split, f"{seed}", digits, terms, operators, heldout_share)


def draw_problems(count: int, split: str, stream: str, digits: int, terms: int, operators: tuple[str, ...],
                  heldout_share: float) -> list[Problem]:
    """``count`` distinct ``split`` problems of ``terms`` operands below ``10 ** digits`` joined by ``operators``,
    drawn from the random stream named ``stream`` (with the other arguments); answers by ``calculator.py``."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r}; allowed: {', '.join(SPLITS)}")
    space = (10 ** digits) ** terms * len(operators) ** (terms - 1)
    share = heldout_share if split == "heldout" else 1 - heldout_share
    if count > space * share / 2:
        raise ValueError(f"{count} {split} problems asked of about {int(space * share)} possible ones; "
                         f"allowed: at most half of them (raise digits or terms)")
    rng = random.Random(f"{stream}:{split}:{digits}:{terms}:{''.join(operators)}")
    seen: dict[str, Problem] = {}
    while len(seen) < count:
        values = [rng.randrange(10 ** digits) for _ in range(terms)]
        ops = [rng.choice(operators) for _ in range(terms - 1)]
        question = "".join(f"{v}{o}" for v, o in zip(values, ops)) + str(values[-1])
        if question not in seen and split_of(question, heldout_share) == split:
            seen[question] = Problem(question, format_number(calculate(question)))
    return list(seen.values())
