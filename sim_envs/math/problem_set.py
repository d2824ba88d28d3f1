"""Problem sets from JSONL files: one JSON object per line, the prompt and answer fields named by the caller."""

from __future__ import annotations

import json
from pathlib import Path

from sim_envs.errors import TaskConfigError
from sim_envs.math.arithmetic import Problem


def load_jsonl(path: str | Path, prompt_field: str = "prompt", answer_field: str = "answer") -> list[Problem]:
    """Every line's ``prompt_field`` and ``answer_field`` (answers as text); one clear error naming the line and the
    field for a line that lacks them or is not JSON."""
    path = Path(path)
    if not path.is_file():
        raise TaskConfigError(f"problem set {path} does not exist")
    problems = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise TaskConfigError(f"{path}:{number}: not JSON ({error.msg})") from None
        missing = [f for f in (prompt_field, answer_field) if not isinstance(row, dict) or f not in row]
        if missing:
            raise TaskConfigError(f"{path}:{number}: no field {missing[0]!r}; the problem set's fields are set by "
                                  f"prompt_field={prompt_field!r} and answer_field={answer_field!r}")
        problems.append(Problem(str(row[prompt_field]), str(row[answer_field])))
    if not problems:
        raise TaskConfigError(f"problem set {path} has no problems")
    return problems
