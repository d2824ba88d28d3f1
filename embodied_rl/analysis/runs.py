"""A run directory read back for comparison: its config, its stages' ``metrics.jsonl`` rows laid end to end, the
final evaluation on the fixed state set, and its evaluation videos.

A run directory is what ``embodied-rl train`` writes: ``config.yaml``, ``summary.json`` and either its own
``metrics.jsonl`` (one stage) or one sub-directory per stage (``0-sft/``, ``1-grpo/``, each with ``metrics.jsonl``,
``summary.json``, ``videos/``). A directory holding run directories (a sweep's, or any folder of runs) expands
into them (``find_runs``).

Stages are laid end to end: a stage's env steps and wall time start where the previous stage's ended (its last
row's ``env_steps``; its ``summary.json`` ``wall_s``, else its last ``time/elapsed_s``). An SFT stage uses no env
steps, so its evaluation sits at the RL stage's step 0.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from embodied_rl.config.errors import ConfigError

METRICS_FILE = "metrics.jsonl"
SUCCESS_KEY = "eval/success_once"
RETURN_KEY = "eval/episode_return"
PER_STAGE_KEYS = ("run_dir", "init_from", "stages")
"""Keys of a stage's own config.yaml that name where it ran, not what (left out of the run's config)."""
_STAGE_DIR = re.compile(r"^(\d+)-(.+)$")


@dataclass
class Stage:
    """One stage's rows (``metrics.jsonl``, in order) and ``summary.json`` (empty while it runs)."""

    name: str
    path: Path
    rows: list[dict]
    summary: dict

    @property
    def env_steps(self) -> float:
        return float(self.rows[-1].get("env_steps", 0)) if self.rows else 0.0

    @property
    def wall_s(self) -> float:
        if "wall_s" in self.summary:
            return float(self.summary["wall_s"])
        times = [row["time/elapsed_s"] for row in self.rows if "time/elapsed_s" in row]
        return float(times[-1]) if times else 0.0

    def videos(self) -> list[Path]:
        return sorted((self.path / "videos").glob("*.mp4")) if (self.path / "videos").is_dir() else []


@dataclass
class Run:
    """A run directory: ``config`` (its ``config.yaml`` flattened to dotted keys) and its ``stages`` in order."""

    path: Path
    config: dict
    stages: list[Stage]
    name: str = ""
    summary: dict = field(default_factory=dict)

    def __post_init__(self):
        self.name = self.name or self.path.name

    @property
    def seed(self):
        return self.config.get("seed")

    def points(self, key: str) -> list[tuple[float, float | None, float]]:
        """``(env steps, wall s, value)`` of every row holding ``key``, stages end to end: a stage's env steps and
        ``time/elapsed_s`` plus the earlier stages' (wall s None in a row without ``time/elapsed_s``)."""
        points = []
        steps_offset = time_offset = 0.0
        for stage in self.stages:
            for row in stage.rows:
                if key in row:
                    wall = time_offset + float(row["time/elapsed_s"]) if "time/elapsed_s" in row else None
                    points.append((steps_offset + float(row.get("env_steps", 0)), wall, float(row[key])))
            steps_offset += stage.env_steps
            time_offset += stage.wall_s
        return points

    def curve(self, key: str, x: str = "env_steps") -> tuple[list[float], list[float]]:
        """``(xs [n], values [n])`` of ``points(key)``; ``x``: ``env_steps`` or ``wall_s`` (rows with a time)."""
        chosen = [(steps if x == "env_steps" else wall, value) for steps, wall, value in self.points(key)]
        chosen = [(at, value) for at, value in chosen if at is not None]
        return [at for at, _ in chosen], [value for _, value in chosen]

    def final(self, key: str):
        """The last value of ``key`` in the last stage that logged it (None if none did)."""
        for stage in reversed(self.stages):
            for row in reversed(stage.rows):
                if key in row:
                    return float(row[key])
        return None

    def final_evaluation(self, score_key: str = SUCCESS_KEY) -> dict:
        """The last row holding ``score_key`` (the final evaluation on the fixed state set), or {}."""
        for stage in reversed(self.stages):
            for row in reversed(stage.rows):
                if score_key in row:
                    return row
        return {}

    @property
    def env_steps(self) -> float:
        return sum(stage.env_steps for stage in self.stages)

    @property
    def wall_s(self) -> float:
        return sum(stage.wall_s for stage in self.stages)

    def env_steps_per_s(self) -> float | None:
        """Env steps per second of the stages that stepped envs: their env steps over their wall time."""
        stepping = [stage for stage in self.stages if stage.env_steps > 0]
        wall = sum(stage.wall_s for stage in stepping)
        return sum(stage.env_steps for stage in stepping) / wall if wall > 0 else None

    def videos(self) -> list[Path]:
        return [video for stage in self.stages for video in stage.videos()]


def flatten(value, prefix: str = "") -> dict:
    """Nested dicts and lists as one dict of dotted keys (``stages.1.algorithm.name``)."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return {prefix: value}
    flat = {}
    for key, item in items:
        flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    if not flat and prefix:
        flat[prefix] = value
    return flat


def _read_rows(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # a line a crash cut short
            continue
    return rows


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        return {}


def _read_config(path: Path) -> dict:
    import yaml

    if not path.is_file():
        return {}
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not readable YAML ({str(error).splitlines()[0]})") from None
    return flatten(loaded) if isinstance(loaded, dict) else {}


def _stage_dirs(path: Path) -> list[Path]:
    """A staged run's stage directories, in order; none unless ``path`` has the run's ``config.yaml``."""
    if not (path / "config.yaml").is_file():
        return []
    found = [(int(m.group(1)), child) for child in path.iterdir()
             if child.is_dir() and (m := _STAGE_DIR.match(child.name)) and (child / METRICS_FILE).is_file()]
    return [child for _, child in sorted(found)]


def is_run_dir(path: Path) -> bool:
    return (path / METRICS_FILE).is_file() or bool(path.is_dir() and _stage_dirs(path))


def load_run(path: Path) -> Run:
    path = Path(path)
    if not is_run_dir(path):
        raise ConfigError(f"{path} is not a run directory (no {METRICS_FILE}, and no stage directories holding one)")
    stage_paths = [path] if (path / METRICS_FILE).is_file() else _stage_dirs(path)
    stages = [Stage(p.name if p != path else "train", p, _read_rows(p / METRICS_FILE), _read_json(p / "summary.json"))
              for p in stage_paths]
    config = _read_config(path / "config.yaml")
    if stage_paths != [path]:  # each stage as it ran (runs written before config.yaml recorded them so)
        for index, stage_path in enumerate(stage_paths):
            for key, value in _read_config(stage_path / "config.yaml").items():
                if key.split(".")[0] not in PER_STAGE_KEYS:
                    config[f"stages.{index}.{key}"] = value
    return Run(path, config, stages, summary=_read_json(path / "summary.json"))


def find_runs(paths: list[str | Path]) -> list[Run]:
    """The runs of ``paths``: each a run directory, or a directory whose sub-directories (any depth) are; one
    clear error for a path that is neither."""
    runs: list[Run] = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise ConfigError(f"{path}: no such directory")
        if is_run_dir(path):
            runs.append(load_run(path))
            continue
        # each metrics.jsonl's run: its directory, or the staged run holding it as a stage
        tops = sorted({(d.parent if _STAGE_DIR.match(d.name) and is_run_dir(d.parent) else d)
                       for d in (found.parent for found in path.rglob(METRICS_FILE))})
        if not tops:
            raise ConfigError(f"{path} holds no run directory (no {METRICS_FILE} under it)")
        runs.extend(load_run(p) for p in tops)
    names = [run.name for run in runs]
    for run in runs:  # the same directory name in two places: name it by its parent too
        if names.count(run.name) > 1:
            run.name = f"{run.path.parent.name}/{run.path.name}"
    return runs
