"""A multi-turn tool-use text env: arithmetic with several terms, where the model may call a calculator.

A conversation: the prompt is the problem (``12*34+56-78``); each model turn either ends in a tool call,
``<calc>12*34</calc>``, which the env evaluates (``calculator.py``, never ``eval``) and answers with an observation
turn, `` = 408\\n`` (``" = error\\n"`` for a malformed call), or it does not, and then it is the final turn (its
answer, ``Answer: N`` or ``\\boxed{N}``, is scored). At ``max_turns`` model turns the conversation ends whatever the
last turn was. The observation turns are written by the env: a trainer should not train on their tokens.

A model turn is cut right after its first ``</calc>`` (``STOP_STRINGS``, as a stop string of generation): what
follows in the same turn is dropped, so the model never writes past a call into the observation's place.

Reward, each part reported in ``info`` where a conversation ends:

* ``reward/outcome``: 1 if the answer is right (the verifier, on the model's own text with its tool calls removed,
  so a number in a call or in an observation is never read as the answer);
* ``reward/format``: 1 if the answer was given in an answer format (``Answer:``, ``\\boxed{}``, ``####``);
* ``reward/tool``: ``-(malformed_penalty * malformed + call_cost * calls)``, ``malformed`` counting calls whose
  expression does not parse, a ``</calc>`` without ``<calc>``, and a ``<calc>`` the conversation never closed;

``reward = outcome_weight * outcome + format_weight * format + reward/tool``. Conversations come in groups of
``group_size`` on one problem (GRPO), as in ``TextTaskEnv``; a round is ``reset`` (draws the next problems), then
``step`` until every conversation is over (no same-step autoreset: a group's conversations end at different turns).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from sim_envs.math.arithmetic import OPERATORS, Problem, draw_problems
from sim_envs.math.calculator import CalcError, calculate, format_number
from sim_envs.math.text_env import TextTaskEnv
from sim_envs.vector_env import EpisodeStats, StepBatch

CALL_OPEN, CALL_CLOSE = "<calc>", "</calc>"
STOP_STRINGS = (CALL_CLOSE,)
ERROR_RESULT = "error"
MAX_TERMS = 6
_CALL_SPANS = re.compile(f"{re.escape(CALL_OPEN)}.*?(?:{re.escape(CALL_CLOSE)}|$)", re.DOTALL)


def generate_problems(count: int, split: str = "train", seed: int = 0, digits: int = 2, terms: int = 4,
                      operators: tuple[str, ...] = OPERATORS, heldout_share: float = 0.1) -> list[Problem]:
    """``count`` distinct problems of ``split`` with ``terms`` (2 to ``MAX_TERMS``) operands below ``10 ** digits``,
    the same list for the same arguments; splits by ``arithmetic.split_of``, the hash ``math_arith`` splits by."""
    if not 1 <= digits <= 4 or not 2 <= terms <= MAX_TERMS or not operators or set(operators) - set(OPERATORS):
        raise ValueError(f"digits={digits} (1-4), terms={terms} (2-{MAX_TERMS}), operators={operators} "
                         f"({OPERATORS})")
    return draw_problems(count, split, f"tool:{seed}", digits, terms, tuple(operators), heldout_share)


@dataclass(frozen=True)
class ToolCall:
    """A call that ended a turn: its ``expression``, and ``result`` as shown to the model (None: malformed)."""

    expression: str
    result: str | None


@dataclass(frozen=True)
class ParsedTurn:
    """One model turn read by the env: ``text`` (up to and including the first ``</calc>``), the ``call`` ending
    it (None: no ``</calc>``, so the turn is final), ``unclosed``: a ``<calc>`` without its ``</calc>``."""

    text: str
    call: ToolCall | None
    unclosed: bool

    @property
    def malformed(self) -> int:
        return int(self.unclosed or (self.call is not None and self.call.result is None))


def parse_turn(text: str) -> ParsedTurn:
    """Read a model turn: the call ending it, if any, evaluated by the calculator."""
    close = text.find(CALL_CLOSE)
    if close < 0:
        return ParsedTurn(text, None, CALL_OPEN in text)
    kept = text[:close + len(CALL_CLOSE)]
    opened = kept.rfind(CALL_OPEN, 0, close)
    if opened < 0:  # a close without an open: a call the model did not start
        return ParsedTurn(kept, ToolCall(kept[:close], None), False)
    expression = kept[opened + len(CALL_OPEN):close]
    try:
        result = format_number(calculate(expression))
    except CalcError:
        result = None
    return ParsedTurn(kept, ToolCall(expression, result), False)


def observation_text(call: ToolCall) -> str:
    """The env's turn after ``call``: `` = 408\\n``, or `` = error\\n``."""
    return f" = {call.result if call.result is not None else ERROR_RESULT}\n"


def answer_text(model_text: str) -> str:
    """The model's text the answer is read from: its tool calls (and an unclosed one) removed."""
    return _CALL_SPANS.sub(" ", model_text)


def demonstration(problem: Problem) -> list[tuple[str, bool]]:
    """A conversation that uses the tool correctly and answers: ``(text, written_by_model)`` segments, e.g.
    ``<calc>12*34+56-78</calc>`` (model), `` = 386\\n`` (env), ``Answer: 386`` (model)."""
    call = ToolCall(problem.question, format_number(calculate(problem.question)))
    return [(f"{CALL_OPEN}{problem.question}{CALL_CLOSE}", True), (observation_text(call), False),
            (f"Answer: {call.result}", True)]


class ToolTaskEnv(TextTaskEnv):
    """N conversations on group-contiguous problems; see the module docstring."""

    stop_strings = STOP_STRINGS
    multi_turn = True

    def __init__(self, problems: list[Problem], num_envs: int, seed: int = 0, group_size: int = 1,
                 outcome_weight: float = 1.0, format_weight: float = 0.0, use_math_verify: bool = True,
                 max_turns: int = 3, malformed_penalty: float = 0.1, call_cost: float = 0.0):
        super().__init__(problems, num_envs, seed, group_size, outcome_weight, format_weight, use_math_verify)
        if max_turns < 1:
            raise ValueError(f"max_turns={max_turns}; allowed: at least 1")
        self.max_turns = self.max_episode_steps = max_turns
        self.malformed_penalty, self.call_cost = malformed_penalty, call_cost
        self._clear()

    def _clear(self) -> None:
        n = self.num_envs
        self.done = np.zeros(n, bool)
        self.turns, self.calls, self.malformed = (np.zeros(n, np.int64) for _ in range(3))
        self.model_texts = [""] * n

    def reset(self, seed: int | None = None, state_ids: list[int] | None = None) -> dict:
        """Start N new conversations (the next problems, or ``state_ids``' problems)."""
        obs = super().reset(seed, state_ids)
        self._clear()
        return obs

    def step(self, actions: Sequence[str | None], observe: bool = True) -> StepBatch:
        """One turn of every conversation still going: ``actions[i]`` is conversation i's model turn (text), None
        for a conversation that is over. ``obs["observation"][i]``: the env's turn to append ("" where none)."""
        if len(actions) != self.num_envs:
            raise ValueError(f"{len(actions)} turns for {self.num_envs} conversations")
        if self.done.all():
            raise ValueError("every conversation is over: reset() starts the next ones")
        wrong = [i for i, a in enumerate(actions) if (a is None) != bool(self.done[i])]
        if wrong:
            i = wrong[0]
            raise ValueError(f"conversation {i} is {'over' if self.done[i] else 'still going'}; its turn must be "
                             f"{'None' if self.done[i] else 'a string'}")
        n = self.num_envs
        observations = [""] * n
        terminated, truncated = np.zeros(n, bool), np.zeros(n, bool)
        for i, action in enumerate(actions):
            if action is None:
                continue
            turn = parse_turn(str(action))
            self.turns[i] += 1
            self.model_texts[i] += turn.text
            self.calls[i] += turn.call is not None
            self.malformed[i] += turn.malformed
            if turn.call is None:
                terminated[i] = True
            elif self.turns[i] >= self.max_turns:
                truncated[i] = True
            else:
                observations[i] = observation_text(turn.call)
        ended = terminated | truncated
        self.done |= ended
        return self._batch(observations, terminated, truncated, ended)

    def _batch(self, observations, terminated, truncated, ended) -> StepBatch:
        n = self.num_envs
        correct, formatted = np.zeros(n, bool), np.zeros(n, bool)
        where = np.flatnonzero(ended)
        if len(where):
            correct[where], formatted[where] = self.score_responses(
                [answer_text(self.model_texts[i]) for i in where], self.current[where])
        cost = self.malformed_penalty * self.malformed + self.call_cost * self.calls
        tool = np.where(ended, -cost, 0.0).astype(np.float32)
        rewards = (self.outcome_weight * correct + self.format_weight * formatted + tool).astype(np.float32)
        obs = {**self.observation(), "observation": np.array(observations, dtype=np.str_)}
        stats = EpisodeStats(ended, rewards.copy(), self.turns.copy(), correct, correct)
        info = {"reward/outcome": correct.astype(np.float32), "reward/format": formatted.astype(np.float32),
                "reward/tool": tool, "tool/calls": self.calls * ended, "tool/malformed": self.malformed * ended,
                "turns": self.turns * ended}
        return StepBatch(obs, rewards, terminated, truncated, obs, correct, stats, info)

    def demonstrations(self) -> list[tuple[str, list[tuple[str, bool]]]]:
        """Every problem as ``(question, demonstration segments)``: an SFT warm start that can leave the env's
        segments out of its loss."""
        return [(p.question, demonstration(p)) for p in self.problems]

    def sft_examples(self) -> list[tuple[str, str]]:
        """Every problem as ``(question, whole demonstrated response)``, for an SFT that trains on the whole
        response (env segments included) and tokenizes it in one piece, as a character tokenizer may."""
        return [(q, "".join(text for text, _ in segments)) for q, segments in self.demonstrations()]
