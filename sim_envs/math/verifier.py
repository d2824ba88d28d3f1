"""Scoring a model's response against a reference answer: format (did it give an answer where asked) and outcome
(is the answer right). ``math-verify`` decides equivalence where it is installed (fractions, LaTeX, sets);
otherwise an exact comparison of the normalised answer (numbers compared as numbers)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

ANSWER_PATTERNS = (re.compile(r"(?:Answer|answer|ANSWER)\s*[:：]\s*([^\n]*)"),
                   re.compile(r"####\s*([^\n]*)"))
NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")


@dataclass(frozen=True)
class Score:
    """``formatted``: the answer was given in an answer format (``\\boxed{}``, ``Answer:``, ``####``);
    ``correct``: it equals the reference; ``extracted``: what was read as the answer (None if nothing)."""

    formatted: bool
    correct: bool
    extracted: str | None


def extract_answer(response: str) -> tuple[str | None, bool]:
    """``(answer text, formatted)``: the last ``\\boxed{}`` / ``Answer:`` / ``####`` answer, else the last number in
    the response (formatted False), else None."""
    boxed = _last_boxed(response)
    if boxed is not None:
        return boxed, True
    for pattern in ANSWER_PATTERNS:
        found = pattern.findall(response)
        if found:
            return found[-1].strip(), True
    numbers = NUMBER.findall(response)
    return (numbers[-1], False) if numbers else (None, False)


def _last_boxed(text: str) -> str | None:
    """The contents of the last ``\\boxed{...}``, nested braces included (None without one, or unclosed)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for index in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth < 0:
            return text[begin:index].strip()
    return None


def _as_number(text: str) -> Fraction | None:
    text = text.strip().rstrip(".").replace(",", "").replace(" ", "")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def _normalised_equal(answer: str, reference: str) -> bool:
    a, b = _as_number(answer), _as_number(reference)
    if a is not None and b is not None:
        return a == b
    return " ".join(answer.split()).strip(" .$") == " ".join(reference.split()).strip(" .$")


def _math_verify():
    try:
        from math_verify import parse, verify  # a dependency; the exact comparison covers its absence
    except ImportError:
        return None
    return parse, verify


def reference_answer(reference: str) -> str:
    """The answer a reference solution states: a worked solution (GSM8K's ``... #### 72``, MATH's ``\\boxed{}``,
    ``Answer: ...``) gives its formatted answer; a plain answer is itself."""
    answer, formatted = extract_answer(reference)
    return answer if formatted else reference.strip()


def score(response: str, reference: str, use_math_verify: bool = True) -> Score:
    """Format and outcome of ``response`` against ``reference`` (a plain answer or a worked solution)."""
    reference = reference_answer(reference)
    answer, formatted = extract_answer(response)
    if answer is None:
        return Score(False, False, None)
    correct = _normalised_equal(answer, reference)
    # two plain numbers are settled by the exact comparison; math-verify (about 1.5 ms a call) is for the rest
    both_numbers = _as_number(answer) is not None and _as_number(reference) is not None
    engine = _math_verify() if use_math_verify and not correct and not both_numbers else None
    if engine is not None:
        parse, verify = engine
        try:
            correct = bool(verify(parse(f"${reference}$"), parse(f"${answer}$")))
        except Exception:  # noqa: BLE001 - math-verify raises on text it cannot parse: not equal
            correct = False
    return Score(formatted, correct, answer)
