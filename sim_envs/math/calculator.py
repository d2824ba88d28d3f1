"""The calculator behind the ``math_tool`` task's tool calls: integer arithmetic (``+ - * /``, parentheses, unary
minus) parsed by hand, never ``eval``, with limits on the text so no call can take long or build a huge number.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_LENGTH = 64
"""Longest expression accepted (characters, spaces included)."""
MAX_DIGITS = 12
"""Longest integer literal accepted: with ``MAX_LENGTH`` this bounds every result to a few hundred digits."""
_TOKEN = re.compile(r"\s*(?:(\d+)|([-+*/()]))")


class CalcError(ValueError):
    """The expression is not one the calculator evaluates (not arithmetic, too long, unbalanced, division by 0)."""


def calculate(expression: str) -> Fraction:
    """The exact value of ``expression`` (usual precedence: ``*`` and ``/`` before ``+`` and ``-``, left to right)."""
    if len(expression) > MAX_LENGTH:
        raise CalcError(f"longer than {MAX_LENGTH} characters")
    tokens = _tokens(expression)
    value, position = _sum(tokens, 0)
    if position != len(tokens):
        raise CalcError(f"unexpected {tokens[position]!r}")
    return value


def format_number(value: Fraction) -> str:
    """``84``, ``-3`` or ``7/2``: how results are shown to the model."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _tokens(expression: str) -> list[str]:
    tokens, position = [], 0
    while position < len(expression):
        if expression[position:].isspace():
            break
        match = _TOKEN.match(expression, position)
        if match is None:
            raise CalcError(f"not arithmetic at {expression[position:].lstrip()[:8]!r}")
        number, operator = match.groups()
        if number is not None and len(number) > MAX_DIGITS:
            raise CalcError(f"a number longer than {MAX_DIGITS} digits")
        tokens.append(number if number is not None else operator)
        position = match.end()
    if not tokens:
        raise CalcError("empty expression")
    return tokens


def _sum(tokens: list[str], position: int) -> tuple[Fraction, int]:
    value, position = _product(tokens, position)
    while position < len(tokens) and tokens[position] in "+-":
        operator = tokens[position]
        right, position = _product(tokens, position + 1)
        value = value + right if operator == "+" else value - right
    return value, position


def _product(tokens: list[str], position: int) -> tuple[Fraction, int]:
    value, position = _factor(tokens, position)
    while position < len(tokens) and tokens[position] in "*/":
        operator = tokens[position]
        right, position = _factor(tokens, position + 1)
        if operator == "/" and right == 0:
            raise CalcError("division by zero")
        value = value * right if operator == "*" else value / right
    return value, position


def _factor(tokens: list[str], position: int) -> tuple[Fraction, int]:
    if position >= len(tokens):
        raise CalcError("the expression ends early")
    token = tokens[position]
    if token in "+-":
        value, position = _factor(tokens, position + 1)
        return (-value if token == "-" else value), position
    if token == "(":
        value, position = _sum(tokens, position + 1)
        if position >= len(tokens) or tokens[position] != ")":
            raise CalcError("unbalanced parentheses")
        return value, position + 1
    if token.isdigit():
        return Fraction(int(token)), position + 1
    raise CalcError(f"unexpected {token!r}")
