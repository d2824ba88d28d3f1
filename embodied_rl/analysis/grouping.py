"""Runs grouped into settings: runs whose configs differ only in their seed (and in where they were written) are
seeds of one setting; a setting is labelled by the config values that tell it from the others."""

from __future__ import annotations

import re
from dataclasses import dataclass

from embodied_rl.analysis.runs import Run

IGNORED_KEYS = ("seed", "run_dir", "runs_root", "cluster.address", "cluster.num_cpus", "logging.")
"""Keys that never make two runs different settings (a key ending in '.' is a prefix)."""

LABEL_KEYS = 3
"""A setting's label names at most this many keys (the task and ``*.name`` keys first); the report's config table
has them all."""


def _ignored(key: str) -> bool:
    """An ignored key, at the top or in a stage (``stages.1.seed``)."""
    key = re.sub(r"^stages\.\d+\.", "", key)
    return any(key.startswith(k) if k.endswith(".") else key == k for k in IGNORED_KEYS)


@dataclass
class Setting:
    """Seeds of one configuration: ``label`` names what differs from the other settings."""

    label: str
    runs: list[Run]


def config_differences(runs: list[Run], include_ignored: bool = False) -> dict[str, list]:
    """``{key: [value of each run]}`` for the config keys whose values are not the same in every run (a key a run
    lacks counts as None), in key order."""
    keys = sorted({key for run in runs for key in run.config})
    differences = {}
    for key in keys:
        if not include_ignored and _ignored(key):
            continue
        values = [run.config.get(key) for run in runs]
        if any(value != values[0] for value in values[1:]):
            differences[key] = values
    return differences


def _short(key: str, keys: list[str]) -> str:
    """The shortest dotted suffix of ``key`` that no other key of ``keys`` ends with."""
    parts = key.split(".")
    for start in range(len(parts) - 1, -1, -1):
        suffix = ".".join(parts[start:])
        if not any(other != key and (other == suffix or other.endswith("." + suffix)) for other in keys):
            return suffix
    return key


def _partition(runs: list[Run], key: str) -> tuple:
    """Which runs share a value of ``key``: each run's index of the first run with its value."""
    values = [repr(run.config.get(key)) for run in runs]
    return tuple(values.index(value) for value in values)


def _label_keys(runs: list[Run], keys: list[str]) -> tuple[list[str], int]:
    """At most ``LABEL_KEYS`` of ``keys`` (the task and ``*.name`` keys first), leaving out a key that splits the
    runs as an earlier one does (a stage's name and its algorithm's name)."""
    chosen, splits = [], set()
    for key in sorted(keys, key=lambda key: (not (key == "task" or key.endswith(".name")), key)):
        split = _partition(runs, key)
        if split not in splits:
            chosen.append(key)
            splits.add(split)
    return chosen[:LABEL_KEYS], max(len(chosen) - LABEL_KEYS, 0)


def group_runs(runs: list[Run], group_by: list[str] | None = None) -> list[Setting]:
    """Settings in the order their first run was given. ``group_by``: the config keys that make a setting
    (default: every key that differs between runs, less the seed and the paths)."""
    keys = group_by if group_by is not None else list(config_differences(runs))
    named, unnamed = _label_keys(runs, keys)
    shown = {key: _short(key, named) for key in named}
    more = f" (+{unnamed} more keys)" if unnamed else ""
    settings: dict[tuple, Setting] = {}
    for run in runs:
        values = tuple(repr(run.config.get(key)) for key in keys)
        if values not in settings:
            label = (", ".join(f"{shown[key]}={run.config.get(key)}" for key in named) + more) or "all runs"
            settings[values] = Setting(label, [])
        settings[values].runs.append(run)
    return list(settings.values())
