"""The README and docs/*.md stay true to the CLI: every ``embodied-rl ...`` command in their fenced code blocks parses,
names a registered task and an existing config file, and (for ``train``) resolves to a valid config; every relative
link points to an existing file (and heading); the README stays a short guide."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

import sim_envs
from embodied_rl.cli import build_parser
from embodied_rl.commands.train_reasoning import is_text_task
from embodied_rl.config import ConfigError
from embodied_rl.config.reasoning import load_reasoning_config
from embodied_rl.config.stages import load_stages
from tests_helpers import REPO

README = REPO / "README.md"
README_MAX_LINES = 170
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _fenced_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every line inside a fenced code block."""
    inside, lines = False, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
        elif inside:
            lines.append((number, line))
    return lines


def _commands(path: Path) -> list[tuple[str, str]]:
    """(``file:line`` id, command) for each fenced line starting with ``embodied-rl `` (after an optional ``$ ``),
    with lines continued by a trailing backslash joined. Nothing is skipped: a command shown in a fenced block
    must be concrete (no ``<...>`` or ``...`` placeholders), so that it can be checked here; synopses with
    placeholders belong in inline code or tables."""
    found, pending, start = [], None, 0
    for number, line in _fenced_lines(path):
        text = line.strip()
        if pending is not None:
            pending += " " + text.rstrip("\\").strip()
            if not text.endswith("\\"):
                found.append((f"{path.relative_to(REPO)}:{start}", pending))
                pending = None
            continue
        if text.startswith("$ "):
            text = text[2:].lstrip()
        if text.startswith("embodied-rl "):
            if text.endswith("\\"):
                pending, start = text.rstrip("\\").strip(), number
            else:
                found.append((f"{path.relative_to(REPO)}:{number}", text))
    assert pending is None, f"{path}: a command continued with a backslash runs past the end of its block"
    return found


COMMANDS = [command for page in PAGES for command in _commands(page)]


def test_the_commands_are_found():
    assert len(_commands(README)) >= 3
    assert len(COMMANDS) >= 30  # extraction still finds the docs' examples
    assert {page.name for page in PAGES} >= {"README.md", "results.md", "robustness.md"}


@pytest.mark.parametrize("where, command", COMMANDS, ids=[where for where, _ in COMMANDS])
def test_every_documented_command_is_accepted_by_the_cli(where, command, capsys):
    argv = shlex.split(command, comments=True)
    assert argv[0] == "embodied-rl"
    try:
        args = build_parser().parse_args(argv[1:])
    except SystemExit as exit_:  # the parser's error(): one line on stderr, exit 2
        pytest.fail(f"{where}: `{command}` is refused (exit {exit_.code}): {capsys.readouterr().err.strip()}")
    task = getattr(args, "task", None)
    if task is not None:
        try:
            sim_envs.get_task(task)  # a registered task, or one a prefix resolves (gym:<id>)
        except sim_envs.TaskConfigError as error:
            pytest.fail(f"{where}: --task {task} is not a task: {error}")
    config = getattr(args, "config", None)
    if config is not None:
        assert (REPO / config).is_file(), f"{where}: --config {config} is not a file in the repository"
    if args.command == "train" and task is not None and not args.resume:
        # What `embodied-rl train` resolves before it starts anything: a bad key or value exits 2 there.
        try:
            if is_text_task(task):
                load_reasoning_config(task, str(REPO / config) if config else None, args.overrides)
            else:
                load_stages(task, str(REPO / config) if config else None, args.overrides)
        except ConfigError as error:
            pytest.fail(f"{where}: `{command}` has a bad config: {error}")


def test_the_readme_is_a_short_guide():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/ (at most {README_MAX_LINES})"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    fenced = {number for number, _ in _fenced_lines(path)}
    return {_slug(line.lstrip("#")) for number, line in enumerate(path.read_text().splitlines(), 1)
            if line.startswith("#") and number not in fenced}


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(REPO)) for page in PAGES])
def test_every_relative_link_points_to_an_existing_file(page):
    fenced = {number for number, _ in _fenced_lines(page)}
    broken = []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if number in fenced:
            continue
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                continue
            path_part, _, anchor = target.partition("#")
            resolved = (page.parent / path_part).resolve() if path_part else page
            if not resolved.exists():
                broken.append(f"{page.name}:{number}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.name}:{number}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)
