"""Text tasks in the registry: the built-in synthetic arithmetic set, and any JSONL problem set.

A text env's options: ``split`` (train or heldout), ``count`` (problems in the set), ``seed``, ``group_size``,
the reward weights ``outcome_weight`` and ``format_weight``; arithmetic also ``digits``, ``terms``, ``operators``;
JSONL ``path``, ``prompt_field``, ``answer_field`` (and ``heldout_path`` for its held-out split).

The multi-turn tool-use task ``math_tool`` (``multi_turn.py``): ``split``, ``count``, ``heldout_count``, ``digits``,
``terms`` (2 to 6), ``operators`` as arithmetic; ``max_turns`` (model turns per conversation); besides the text env's
options, the tool reward's ``malformed_penalty`` (per malformed call) and ``call_cost`` (per call).
"""

from __future__ import annotations

from sim_envs.errors import TaskConfigError
from sim_envs.math.arithmetic import generate, split_of
from sim_envs.math.multi_turn import ToolTaskEnv, generate_problems
from sim_envs.math.problem_set import load_jsonl
from sim_envs.math.text_env import TextTaskEnv
from sim_envs.registry import register_task

TEXT_SIMULATOR = "text"
ENV_KEYS = ("seed", "group_size", "outcome_weight", "format_weight", "use_math_verify")


def _env(problems, num_envs: int, options: dict) -> TextTaskEnv:
    unknown = set(options) - set(ENV_KEYS)
    if unknown:
        raise TaskConfigError(f"unknown text-env option {sorted(unknown)[0]!r}; allowed: {', '.join(ENV_KEYS)}")
    return TextTaskEnv(problems, num_envs, **options)


@register_task("math_arith", "Integer arithmetic problems generated in code (a + b, a - b, a * b)", TEXT_SIMULATOR,
               builtin=True)
def math_arith(num_envs: int, split: str = "train", count: int = 2000, heldout_count: int = 500, digits: int = 2,
               terms: int = 2, operators: str = "+-*", heldout_share: float = 0.1, **options) -> TextTaskEnv:
    """``count`` train problems, or ``heldout_count`` held-out ones (never among any train problems)."""
    try:
        problems = generate(count if split == "train" else heldout_count, split, seed=0, digits=digits, terms=terms,
                            operators=tuple(operators),
                            heldout_share=heldout_share)
    except ValueError as error:
        raise TaskConfigError(f"math_arith: {error}") from None
    return _env(problems, num_envs, options)


@register_task("math_jsonl", "A JSONL problem set (fields named by prompt_field / answer_field)", TEXT_SIMULATOR)
def math_jsonl(num_envs: int, path: str | None = None, split: str = "train", heldout_path: str | None = None,
               prompt_field: str = "prompt", answer_field: str = "answer", count: int | None = None,
               **options) -> TextTaskEnv:
    """Without ``heldout_path`` the file is split by ``split_of`` (about a tenth held out, never trained on)."""
    if not path:
        raise TaskConfigError("math_jsonl needs path= (a JSONL file; heldout_path= for a separate held-out file)")
    if split == "heldout" and heldout_path:
        problems = load_jsonl(heldout_path, prompt_field, answer_field)
    else:
        problems = [p for p in load_jsonl(path, prompt_field, answer_field)
                    if heldout_path or split_of(p.question) == split]
    if not problems:
        raise TaskConfigError(f"math_jsonl: no {split} problems in {path}")
    return _env(problems[:count] if count else problems, num_envs, options)


TOOL_ENV_KEYS = (*ENV_KEYS, "malformed_penalty", "call_cost")


@register_task("math_tool", "Multi-term arithmetic over several turns with a calculator tool (<calc>12*7</calc>)",
               TEXT_SIMULATOR, builtin=True)
def math_tool(num_envs: int, split: str = "train", count: int = 2000, heldout_count: int = 500, digits: int = 2,
              terms: int = 4, operators: str = "+-*", max_turns: int = 3, heldout_share: float = 0.1,
              **options) -> ToolTaskEnv:
    """``count`` train problems, or ``heldout_count`` held-out ones (never among any train problems), each a
    conversation of at most ``max_turns`` model turns."""
    unknown = set(options) - set(TOOL_ENV_KEYS)
    if unknown:
        raise TaskConfigError(f"unknown text-env option {sorted(unknown)[0]!r}; allowed: {', '.join(TOOL_ENV_KEYS)}")
    try:
        problems = generate_problems(count if split == "train" else heldout_count, split, seed=0, digits=digits,
                                     terms=terms, operators=tuple(operators), heldout_share=heldout_share)
        return ToolTaskEnv(problems, num_envs, max_turns=max_turns, **options)
    except ValueError as error:
        raise TaskConfigError(f"math_tool: {error}") from None
