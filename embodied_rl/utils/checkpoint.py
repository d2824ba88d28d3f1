"""Checkpoints: ``checkpoints/iter_000040/`` with safetensors weights, optimizer + RNG state, counters, config.

Each checkpoint is written to a hidden staging directory and renamed into place (every file, the directory and the
rename fsynced), so a crash mid-save never leaves a checkpoint that looks complete but is not; leftovers of such a
crash are swept at the next save or run start. Loading runs no code from the files: weights are safetensors,
the trainer state is read with ``torch.load(weights_only=True)`` (tensors and plain containers only). When a run
directory's newest checkpoint cannot be read (truncated, corrupt), loading falls back to the one before, with a
warning.

Two kinds live side by side in ``checkpoints/``:

* clean ``iter_N/``: written between iterations, with the env workers' states: a resume from one is exact;
* stop ``interrupted_iter_N/``: written when a run stops mid-iteration (Ctrl-C, SIGTERM, a failure in the
  driver's loop), counters marked ``interrupted`` with a ``stop_reason``; no env states, and the weights may be one
  update past the counters. It never replaces or rotates out a clean checkpoint.

A run directory resolves to its newest checkpoint, a clean one winning a tie: a stop checkpoint is used only when it
is of a later iteration than every clean one (strictly more training). A clean checkpoint of iteration N removes the
stop checkpoints of iterations before N (they are superseded); ``keep_last`` counts clean checkpoints only.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from embodied_rl.utils.atomic import (fsync_path, make_staging_directory, publish_directory, remove_directory,
                                     sweep_publish_leftovers)

WEIGHTS_FILE = "model.safetensors"
TRAINER_STATE_FILE = "trainer_state.pt"
COUNTERS_FILE = "counters.json"
CONFIG_FILE = "config.yaml"
ENV_STATE_FILE = "env_state.json"
"""Each env worker's ``EnvWorker.snapshot`` (episodes so far, seed streams): a resumed run continues them."""


@dataclass
class Checkpoint:
    path: Path
    weights: dict
    trainer_state: bytes | None
    counters: dict
    config_yaml: str
    env_state: list | None = None


CLEAN_PREFIX = "iter_"
STOP_PREFIX = "interrupted_iter_"
"""Name prefix of stop checkpoints (written when a run stops mid-iteration), beside clean ``iter_N`` ones."""


def save_checkpoint(checkpoints_dir: Path, iteration: int, weights: dict, trainer_state: bytes,
                    counters: dict, config_yaml: str, keep_last: int, env_state: list | None = None,
                    stopped: bool = False) -> Path:
    """Write ``iter_<iteration>/`` (or, ``stopped``, ``interrupted_iter_<iteration>/``) in ``checkpoints_dir``.
    A clean one then rotates the clean ones to the newest ``keep_last`` and removes superseded stop checkpoints;
    a stop checkpoint removes nothing."""

    def write(staging: Path) -> None:
        save_file({k: _tensor(v) for k, v in weights.items()}, str(staging / WEIGHTS_FILE))
        (staging / TRAINER_STATE_FILE).write_bytes(trainer_state)

    return save_checkpoint_with(checkpoints_dir, iteration, write, counters, config_yaml, keep_last, env_state,
                                stopped)


def save_checkpoint_with(checkpoints_dir: Path, iteration: int, write_trainer_files, counters: dict,
                         config_yaml: str, keep_last: int, env_state: list | None = None,
                         stopped: bool = False) -> Path:
    """``save_checkpoint`` whose weights and trainer state ``write_trainer_files(staging)`` writes into the staging
    directory itself (``WEIGHTS_FILE``, ``TRAINER_STATE_FILE``): e.g. a trainer process on this machine writing its
    own files, so that its state never travels through the driver's memory."""
    checkpoints_dir = Path(checkpoints_dir)
    created = not checkpoints_dir.is_dir()
    checkpoints_dir.mkdir(parents=True, exist_ok=True)
    if created:
        fsync_path(checkpoints_dir.parent)
    sweep_publish_leftovers(checkpoints_dir)
    staging = make_staging_directory(checkpoints_dir)
    try:
        write_trainer_files(staging)
        for name in (WEIGHTS_FILE, TRAINER_STATE_FILE):
            if not (staging / name).is_file():
                raise RuntimeError(f"checkpoint of iteration {iteration}: the trainer wrote no {name}")
        (staging / COUNTERS_FILE).write_text(json.dumps(counters, indent=2))
        (staging / CONFIG_FILE).write_text(config_yaml)
        if env_state is not None:
            (staging / ENV_STATE_FILE).write_text(json.dumps(env_state))
        final = checkpoints_dir / f"{STOP_PREFIX if stopped else CLEAN_PREFIX}{iteration:06d}"
        publish_directory(staging, final)  # fsyncs the files, the directory and the rename
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if not stopped:
        for old in list_checkpoints(checkpoints_dir)[:-keep_last]:
            remove_directory(old)
        for old in list_stop_checkpoints(checkpoints_dir):
            if checkpoint_iteration(old) < iteration:
                remove_directory(old)
    return final


def write_trainer_files(directory: Path, weights: dict, trainer_state: dict) -> None:
    """A trainer's part of a checkpoint into ``directory``: ``weights`` (safetensors) and ``trainer_state`` (a dict
    of tensors and plain containers, ``torch.save``d straight to its file: no bytes copy of it in memory)."""
    save_file({k: _tensor(v) for k, v in weights.items()}, str(Path(directory) / WEIGHTS_FILE))
    torch.save(trainer_state, Path(directory) / TRAINER_STATE_FILE)


def _tensor(value) -> torch.Tensor:
    """A weight for safetensors: a contiguous tensor of its own dtype (bf16 included); numpy arrays are taken too."""
    return torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value.contiguous()


def list_checkpoints(checkpoints_dir: Path) -> list[Path]:
    """The clean checkpoints in ``checkpoints_dir``, oldest first."""
    return _listed(checkpoints_dir, CLEAN_PREFIX)


def list_stop_checkpoints(checkpoints_dir: Path) -> list[Path]:
    """The stop checkpoints (``interrupted_iter_N``) in ``checkpoints_dir``, oldest first."""
    return _listed(checkpoints_dir, STOP_PREFIX)


def _listed(checkpoints_dir: Path, prefix: str) -> list[Path]:
    return sorted(p for p in Path(checkpoints_dir).glob(f"{prefix}*")
                  if p.name[len(prefix):].isdigit() and (p / WEIGHTS_FILE).is_file())


def checkpoint_iteration(path: Path) -> int:
    return int(Path(path).name.rsplit("_", 1)[1])


def is_stop_checkpoint(path: Path) -> bool:
    return Path(path).name.startswith(STOP_PREFIX)


def newest_first(checkpoints_dir: Path) -> list[Path]:
    """All checkpoints of ``checkpoints_dir`` in the order a resume tries them: by iteration, newest first, a clean
    one before a stop one of the same iteration (exact resume needs the clean one)."""
    found = list_checkpoints(checkpoints_dir) + list_stop_checkpoints(checkpoints_dir)
    return sorted(found, key=lambda p: (checkpoint_iteration(p), not is_stop_checkpoint(p)), reverse=True)


def has_checkpoint(checkpoints_dir: Path) -> bool:
    """Whether ``checkpoints_dir`` holds any checkpoint a resume can start from (clean or stop)."""
    return bool(newest_first(checkpoints_dir))


def sweep_checkpoint_leftovers(run_dir: Path, folders: tuple[str, ...] = ("checkpoints", "best_checkpoint")) -> None:
    """At a run's start: remove what saves killed mid-way left in the run's checkpoint folders (see
    ``sweep_publish_leftovers``), one note line per folder where something was done."""
    for name in folders:
        done = sweep_publish_leftovers(Path(run_dir) / name)
        if done:
            print(f"note: {Path(run_dir) / name}: leftovers of an interrupted save: {'; '.join(done)}",
                  file=sys.stderr, flush=True)


def resolve_checkpoint(path: Path) -> Path:
    """Accept a checkpoint directory, a run directory (latest checkpoint), a folder of checkpoints (a run's
    ``checkpoints/`` or ``best_checkpoint/``: its latest) or a ``model.safetensors`` file."""
    return _candidates(Path(path))[0]


def _candidates(path: Path) -> list[Path]:
    """The checkpoint ``path`` names, or a run directory's checkpoints newest first (see ``newest_first``)."""
    if path.is_file() and path.name == WEIGHTS_FILE:
        return [path.parent]
    if (path / WEIGHTS_FILE).is_file():
        return [path]
    found = newest_first(path / "checkpoints") if (path / "checkpoints").is_dir() else []
    if found:
        return found
    found = newest_first(path)  # a folder of checkpoints itself: a run's checkpoints/ or best_checkpoint/
    if found:
        return found
    raise FileNotFoundError(f"no checkpoint at {path} (expected a checkpoint directory with {WEIGHTS_FILE}, "
                            "a folder of such directories, or a run directory with checkpoints/)")


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be read (truncated, corrupt, or not written by this library)."""


def read_trainer_state(data: bytes) -> dict:
    """The actor's optimizer and RNG state: tensors and plain containers, loaded without unpickling code."""
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def _check_archive(data: bytes) -> None:
    """``torch.save`` writes a zip archive: check every member's CRC without building a tensor (the actor loads the
    state once, later; an optimizer state can be as large as the model)."""
    damaged = zipfile.ZipFile(io.BytesIO(data)).testzip()
    if damaged is not None:
        raise ValueError(f"{TRAINER_STATE_FILE}: {damaged} fails its CRC check")


def _read(directory: Path) -> Checkpoint:
    try:
        weights = load_file(str(directory / WEIGHTS_FILE))
        state_file = directory / TRAINER_STATE_FILE
        trainer_state = state_file.read_bytes() if state_file.is_file() else None
        if trainer_state:
            _check_archive(trainer_state)  # a truncated or altered file fails here, not mid-resume
        counters_file = directory / COUNTERS_FILE
        counters = json.loads(counters_file.read_text()) if counters_file.is_file() else {}
        env_file = directory / ENV_STATE_FILE
        env_state = json.loads(env_file.read_text()) if env_file.is_file() else None
    except Exception as error:  # safetensors, torch and json each raise their own kinds
        raise CheckpointError(f"checkpoint {directory} cannot be read: {type(error).__name__}: "
                              f"{str(error).splitlines()[0] if str(error) else ''}") from error
    config_file = directory / CONFIG_FILE
    return Checkpoint(directory, weights, trainer_state, counters,
                      config_file.read_text() if config_file.is_file() else "", env_state)


def load_checkpoint(path: Path) -> Checkpoint:
    """Load ``path`` (see ``resolve_checkpoint``); for a run directory, the newest checkpoint that reads cleanly."""
    candidates = _candidates(Path(path))
    for directory, older in zip(candidates, candidates[1:]):
        try:
            return _read(directory)
        except CheckpointError as error:
            print(f"warning: {error}; falling back to {older}", file=sys.stderr, flush=True)
    return _read(candidates[-1])
