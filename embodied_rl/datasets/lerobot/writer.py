"""``DemoDataset`` -> a LeRobotDataset v3.0 directory (layout.py), with its statistics (statistics.py).

Features written (LeRobot's names): ``observation.state`` ``[D]`` float32, ``observation.images.<camera>``
``[H, W, 3]`` (``video``: lossless mp4, video.py; or ``image``: PNG in the parquet), ``action`` ``[A]`` float32,
``next.reward`` ``[1]`` float32 and ``next.success`` ``[1]`` bool when the demos carry them, ``next.done`` ``[1]``
bool (True on each episode's last frame), plus ``timestamp`` (``frame_index / fps``), ``frame_index``,
``episode_index``, ``index`` and ``task_index``. A frame's task is its episode's instruction (``meta/tasks.parquet``
holds each distinct text once).

The directory is written in a hidden staging directory beside ``out`` and renamed into place when whole: an
interrupted write leaves nothing under ``out``; an ``out`` that exists and is not empty is refused before anything is
written (ConfigError, one line).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embodied_rl.config.errors import ConfigError
from embodied_rl.datasets.lerobot import layout, statistics, tables, video
from embodied_rl.demos.dataset import DemoDataset


@dataclass
class WriteResult:
    path: Path
    episodes: int
    frames: int
    cameras: list[str]
    """The camera features written (``observation.images.<camera>``)."""
    files: int
    """Data files (each with one video file per camera)."""


def write_lerobot_dataset(demos: DemoDataset, out: str | Path, fps: int, instructions: str | Sequence[str],
                          camera_names: Sequence[str] | None = None, image_storage: str = "video",
                          robot_type: str | None = None, max_file_frames: int | None = None) -> WriteResult:
    """Write ``demos`` as a LeRobot dataset at ``out`` (which must not exist, or be an empty directory).

    Args:
        demos: ``E`` episodes, ``N`` frames; ``rgb`` ``[N, H, W, 3 * cameras]`` (optional) is split per camera.
        fps: frames per second of the episodes (the env's control frequency).
        instructions: the task text of every episode, or one per episode (``[E]``).
        camera_names: one name per camera (``observation.images.<name>``); default ``camera_0``, ``camera_1``, ...
        image_storage: ``video`` (mp4 per camera, lossless) or ``image`` (PNG per frame in the parquet).
        robot_type: ``meta/info.json``'s ``robot_type`` (None: left null).
        max_file_frames: frames per data (and video) file at most, whole episodes per file; None: as many as fit
            lerobot's file sizes (100 MB of raw rows, 200 MB of raw frames).
    """
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} already exists and is not empty; choose a new directory (nothing was written)")
    if fps <= 0:
        raise ConfigError(f"fps={fps} is out of range; allowed: an integer >= 1")
    if image_storage not in ("video", "image"):
        raise ConfigError(f"image_storage={image_storage!r} is not supported; allowed: video, image")
    plan = _plan(demos, instructions, camera_names, image_storage)
    out.parent.mkdir(parents=True, exist_ok=True)
    from embodied_rl.utils.atomic import make_staging_directory, publish_directory

    staging = make_staging_directory(out.parent)
    try:
        files = _write_contents(staging, demos, plan, int(fps), robot_type, max_file_frames)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):  # someone wrote there meanwhile: keep theirs
            raise ConfigError(f"--out {out} was filled while the dataset was written; nothing was replaced")
        publish_directory(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return WriteResult(out, demos.num_episodes, demos.num_steps, list(plan.cameras), files)


@dataclass
class _Plan:
    features: dict
    cameras: dict[str, int]
    """Camera feature -> its first channel in ``demos.rgb``."""
    tasks: list[str]
    episode_task: np.ndarray
    """``[E]`` int64: each episode's task_index."""
    starts: np.ndarray
    """``[E + 1]`` int64: first row of each episode (and N)."""


def _plan(demos: DemoDataset, instructions, camera_names, image_storage: str) -> _Plan:
    episodes, n = demos.num_episodes, demos.num_steps
    lengths = demos.episode_lengths
    if n == 0 or episodes == 0:
        raise ConfigError("the demonstrations hold no episodes; nothing to write")
    expected = np.repeat(np.arange(episodes), lengths)
    if len(demos.episode_index) != n or not np.array_equal(demos.episode_index, expected):
        raise ValueError("episode_index must number episodes 0..E-1 with each episode's rows contiguous")
    texts = [instructions] * episodes if isinstance(instructions, str) else [str(t) for t in instructions]
    if len(texts) != episodes:
        raise ValueError(f"{len(texts)} instructions for {episodes} episodes")
    tasks = list(dict.fromkeys(texts))
    features: dict = {}
    if demos.obs is not None and demos.obs.shape[1] > 0:
        features[layout.STATE] = {"dtype": "float32", "shape": [int(demos.obs.shape[1])], "names": None}
    cameras: dict[str, int] = {}
    if demos.rgb is not None:
        _, height, width, channels = demos.rgb.shape
        if channels % 3:
            raise ValueError(f"rgb has {channels} channels; expected 3 per camera")
        names = list(camera_names or [f"camera_{i}" for i in range(channels // 3)])
        if len(names) != channels // 3:
            raise ValueError(f"{len(names)} camera names for {channels // 3} cameras")
        for i, name in enumerate(names):
            key = f"{layout.IMAGES_PREFIX}{name}"
            cameras[key] = 3 * i
            features[key] = {"dtype": image_storage, "shape": [int(height), int(width), 3],
                             "names": ["height", "width", "channels"]}
    features[layout.ACTION] = {"dtype": "float32", "shape": [int(demos.actions.shape[1])], "names": None}
    if demos.rewards is not None:
        features[layout.REWARD] = {"dtype": "float32", "shape": [1], "names": None}
    if demos.success is not None:
        features[layout.SUCCESS] = {"dtype": "bool", "shape": [1], "names": None}
    features[layout.DONE] = {"dtype": "bool", "shape": [1], "names": None}
    features.update({key: dict(value) for key, value in layout.INDEX_FEATURES.items()})
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return _Plan(features, cameras, tasks, np.array([tasks.index(t) for t in texts], np.int64), starts)


def _frame_values(demos: DemoDataset, plan: _Plan, fps: int) -> dict[str, np.ndarray]:
    """Every non-camera feature's values over all N frames."""
    n = demos.num_steps
    done = np.zeros(n, bool)
    done[plan.starts[1:] - 1] = True
    values = {layout.ACTION: np.asarray(demos.actions, np.float32), layout.DONE: done,
              layout.FRAME_INDEX: np.asarray(demos.step_index, np.int64),
              layout.EPISODE_INDEX: np.asarray(demos.episode_index, np.int64),
              layout.INDEX: np.arange(n, dtype=np.int64),
              layout.TASK_INDEX: plan.episode_task[demos.episode_index]}
    values[layout.TIMESTAMP] = (values[layout.FRAME_INDEX] / fps).astype(np.float32)
    if layout.STATE in plan.features:
        values[layout.STATE] = np.asarray(demos.obs, np.float32)
    if demos.rewards is not None:
        values[layout.REWARD] = np.asarray(demos.rewards, np.float32)
    if demos.success is not None:
        values[layout.SUCCESS] = np.asarray(demos.success, bool)
    return values


def _file_groups(plan: _Plan, demos: DemoDataset, max_file_frames: int | None) -> list[list[int]]:
    """Episodes of each data file (whole episodes, in order)."""
    if max_file_frames is None:
        row_bytes = 4 * (demos.obs.shape[1] + demos.actions.shape[1]) + 64
        frame_bytes = 0 if demos.rgb is None else int(np.prod(demos.rgb.shape[1:]))
        budget = layout.DEFAULT_DATA_FILE_SIZE_MB * 2**20 // row_bytes
        if frame_bytes:
            budget = min(budget, layout.DEFAULT_VIDEO_FILE_SIZE_MB * 2**20 // frame_bytes)
        max_file_frames = max(1, budget)
    groups: list[list[int]] = [[]]
    frames = 0
    for episode, length in enumerate(np.diff(plan.starts)):
        if groups[-1] and frames + length > max_file_frames:
            groups.append([])
            frames = 0
        groups[-1].append(episode)
        frames += int(length)
    return groups


def _write_contents(root: Path, demos: DemoDataset, plan: _Plan, fps: int, robot_type: str | None,
                    max_file_frames: int | None) -> int:
    values = _frame_values(demos, plan, fps)
    groups = _file_groups(plan, demos, max_file_frames)
    episode_rows: list[dict] = []
    histograms = {key: np.zeros((3, 256), np.int64) for key in plan.cameras}
    video_infos: dict[str, dict] = {}
    for number, episodes in enumerate(groups):
        chunk, file = layout.chunk_and_file(number, layout.DEFAULT_CHUNK_SIZE)
        rows = slice(int(plan.starts[episodes[0]]), int(plan.starts[episodes[-1] + 1]))
        columns = {key: tables.column(value[rows], plan.features[key]) for key, value in values.items()}
        for key, channel in plan.cameras.items():
            frames = demos.rgb[rows, :, :, channel:channel + 3]
            if plan.features[key]["dtype"] == "video":
                path = root / layout.file_path(layout.VIDEO_PATH, chunk, file, video_key=key)
                video_infos[key] = video.encode_frames(path, frames, fps)
            else:
                columns[key] = tables.column([tables.png_bytes(image) for image in frames], plan.features[key])
        tables.write_table(tables.frames_table(columns, plan.features),
                           root / layout.file_path(layout.DATA_PATH, chunk, file))
        for episode in episodes:
            start, stop = int(plan.starts[episode]), int(plan.starts[episode + 1])
            row = {"episode_index": episode, "tasks": [plan.tasks[plan.episode_task[episode]]],
                   "length": stop - start, "data/chunk_index": chunk, "data/file_index": file,
                   "dataset_from_index": start, "dataset_to_index": stop}
            for key in plan.cameras:
                if plan.features[key]["dtype"] == "video":
                    offset = start - rows.start
                    row.update({f"videos/{key}/chunk_index": chunk, f"videos/{key}/file_index": file,
                                f"videos/{key}/from_timestamp": offset / fps,
                                f"videos/{key}/to_timestamp": (offset + stop - start) / fps})
            episode_stats = {key: statistics.vector_stats(value[start:stop]) for key, value in values.items()}
            for key, channel in plan.cameras.items():
                histogram = statistics.pixel_histogram(demos.rgb[start:stop, :, :, channel:channel + 3])
                histograms[key] += histogram
                episode_stats[key] = statistics.image_stats(histogram, stop - start)
            for feature, stats in episode_stats.items():
                row.update({f"stats/{feature}/{name}": np.asarray(v).tolist() for name, v in stats.items()})
            row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
            if len(demos.episode_seeds) == demos.num_episodes:
                row[layout.EPISODE_SEED] = int(demos.episode_seeds[episode])
            episode_rows.append(row)
    _write_episodes(root, episode_rows)
    tables.write_table(tables.tasks_table(plan.tasks), root / layout.TASKS_PATH)
    stats = {key: statistics.vector_stats(value) for key, value in values.items()}
    stats.update({key: statistics.image_stats(histograms[key], demos.num_steps) for key in plan.cameras})
    ordered = {key: stats[key] for key in plan.features}
    (root / layout.STATS_PATH).write_text(json.dumps(statistics.as_json(ordered), indent=4) + "\n")
    features = {key: dict(value) for key, value in plan.features.items()}
    for key, info in video_infos.items():
        features[key]["info"] = info
    info = {
        "codebase_version": layout.CODEBASE_VERSION, "robot_type": robot_type,
        "total_episodes": demos.num_episodes, "total_frames": demos.num_steps, "total_tasks": len(plan.tasks),
        "chunks_size": layout.DEFAULT_CHUNK_SIZE, "data_files_size_in_mb": layout.DEFAULT_DATA_FILE_SIZE_MB,
        "video_files_size_in_mb": layout.DEFAULT_VIDEO_FILE_SIZE_MB, "fps": fps,
        "splits": {"train": f"0:{demos.num_episodes}"}, "data_path": layout.DATA_PATH,
        "video_path": layout.VIDEO_PATH if video_infos else None, "features": features,
        layout.SOURCE_KEY: {"env_id": demos.env_id, "control_mode": demos.control_mode, "obs_mode": demos.obs_mode}}
    (root / layout.INFO_PATH).write_text(json.dumps(info, indent=4) + "\n")
    return len(groups)


def _write_episodes(root: Path, rows: list[dict]) -> None:
    import pyarrow as pa

    columns = {key: [row.get(key) for row in rows] for key in rows[0]}
    table = pa.table({key: pa.array(values) for key, values in columns.items()})
    tables.write_table(table, root / layout.file_path(layout.EPISODES_PATH, 0, 0))
