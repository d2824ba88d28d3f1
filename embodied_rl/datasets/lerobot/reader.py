"""A LeRobotDataset v3.0 directory (ours or lerobot's) -> ``DemoDataset``.

Feature mapping: ``observation.state`` -> ``obs`` ``[N, D]``; the camera features (``observation.images.*`` in
``meta/info.json`` order) -> ``rgb`` ``[N, H, W, 3 * cameras]``, read only when asked for (``spaces`` with an image
shape, or ``cameras=True``); ``action`` -> ``actions`` ``[N, A]``; ``next.reward`` -> ``rewards``, ``next.success``
-> ``success`` (None when the dataset has no such feature); ``frame_index`` -> ``step_index``. Episodes come in
``episode_index`` order, renumbered ``0..E-1``; their reset seeds from our ``episode_seed`` column (-1 where
absent). Video frames are decoded with ffmpeg (any codec it reads) and picked by timestamp:
frame ``round((from_timestamp + timestamp) * fps)`` of the episode's file.

With ``spaces`` (the task's shapes), a dataset that does not fit is refused with one line (spaces.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from embodied_rl.config.errors import ConfigError
from embodied_rl.datasets.lerobot import layout, tables, video
from embodied_rl.datasets.lerobot.spaces import TaskSpaces, camera_keys, check_features, image_height_width
from embodied_rl.demos.dataset import DemoDataset


def read_info(path: str | Path, where: str = "dataset") -> dict:
    """``meta/info.json`` of the dataset at ``path``; refuses what is not a v3 LeRobot dataset (one line)."""
    path = Path(path)
    if not layout.is_lerobot_dataset(path):
        raise ConfigError(f"{where}={path}: not a LeRobot dataset (no {layout.INFO_PATH})")
    info = json.loads((path / layout.INFO_PATH).read_text())
    version = str(info.get("codebase_version", ""))
    if not version.startswith("v3"):
        raise ConfigError(f"{where}={path}: codebase_version {version or 'missing'} is not supported; allowed: v3.x "
                          "(convert older datasets with lerobot's convert_dataset_v21_to_v30)")
    return info


def read_lerobot_dataset(path: str | Path, spaces: TaskSpaces | None = None, where: str = "dataset",
                         cameras: bool | None = None, max_episodes: int | None = None) -> DemoDataset:
    """Read the LeRobot dataset at ``path`` into a ``DemoDataset``.

    Args:
        spaces: the task's shapes; the dataset's features must fit them (else ConfigError naming the feature).
        where: how messages name the dataset (e.g. ``algorithm.demos``).
        cameras: read the camera frames (default: when ``spaces`` asks for images, or with no ``spaces`` when the
            dataset has cameras).
        max_episodes: the first this many episodes only.
    """
    path = Path(path)
    info = read_info(path, where)
    features = info["features"]
    camera_features = check_features(features, spaces, f"{where}={path}") if spaces is not None \
        else camera_keys(features)
    if cameras is not None:
        camera_features = (camera_features or camera_keys(features)) if cameras else []
    if layout.ACTION not in features:
        raise ConfigError(f"{where}={path}: feature {layout.ACTION!r} is missing from the dataset")
    episodes = _episodes(path, max_episodes)
    image_keys = [k for k in camera_features if features[k]["dtype"] == "image"]
    frames = _frames(path, info, episodes, image_keys)
    fps = float(info["fps"])
    n = frames.num_rows
    state = (tables.column_array(frames, layout.STATE, features[layout.STATE]).astype(np.float32)
             if layout.STATE in features else np.zeros((n, 0), np.float32))
    actions = tables.column_array(frames, layout.ACTION, features[layout.ACTION]).astype(np.float32)
    rewards = success = None
    if layout.REWARD in features:
        rewards = tables.column_array(frames, layout.REWARD, features[layout.REWARD]).reshape(n).astype(np.float32)
    if layout.SUCCESS in features:
        success = tables.column_array(frames, layout.SUCCESS, features[layout.SUCCESS]).reshape(n).astype(bool)
    source_episode = frames.column(layout.EPISODE_INDEX).to_numpy()
    order = {int(e): i for i, e in enumerate(episodes["episode_index"])}
    episode_index = np.array([order[int(e)] for e in source_episode], np.int64)
    step_index = frames.column(layout.FRAME_INDEX).to_numpy().astype(np.int64)
    rgb = None
    if camera_features:
        timestamps = frames.column(layout.TIMESTAMP).to_numpy().astype(np.float64)
        parts = [_camera_frames(path, info, key, frames, episodes, episode_index, timestamps, fps)
                 for key in camera_features]
        rgb = np.concatenate(parts, axis=-1)
    source = info.get(layout.SOURCE_KEY) or {}
    seeds = episodes.get(layout.EPISODE_SEED)
    return DemoDataset(obs=state, actions=actions, episode_index=episode_index, step_index=step_index, rgb=rgb,
                       rewards=rewards, success=success,
                       episode_seeds=np.asarray(seeds if seeds is not None else [-1] * len(order), np.int64),
                       env_id=str(source.get("env_id", "")), control_mode=str(source.get("control_mode", "")),
                       obs_mode=str(source.get("obs_mode", "")))


def read_instructions(path: str | Path) -> list[str]:
    """The task text of each episode (its first task), in ``episode_index`` order."""
    episodes = _episodes(Path(path), None)
    return [str(tasks[0]) if len(tasks) else "" for tasks in episodes["tasks"]]


def _episodes(path: Path, max_episodes: int | None) -> dict[str, list]:
    """The episodes table (``meta/episodes/*/*.parquet``) as columns, sorted by episode_index."""
    table = tables.read_directory_tables(path / layout.EPISODES_DIR)
    keep = [name for name in table.column_names if not name.startswith("stats/")]
    columns = table.select(keep).to_pydict()
    order = np.argsort(np.asarray(columns["episode_index"]), kind="stable")
    if max_episodes is not None:
        order = order[:max_episodes]
    return {name: [values[i] for i in order] for name, values in columns.items()}


def _frames(path: Path, info: dict, episodes: dict[str, list], image_keys: list[str]):
    """The frames of ``episodes`` from their data files (every non-video column, and of the image columns those in
    ``image_keys``), in episode order then frame order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = [k for k, f in info["features"].items() if f["dtype"] not in ("video", "image") or k in image_keys]
    files = dict.fromkeys(zip(episodes["data/chunk_index"], episodes["data/file_index"]))
    parts = [tables.read_columns(path / layout.file_path(info["data_path"], int(chunk), int(file)), wanted)
             for chunk, file in files]
    table = pa.concat_tables(parts, promote_options="default")
    chosen = pa.array(episodes["episode_index"], pa.int64())
    table = table.filter(pc.is_in(table.column(layout.EPISODE_INDEX), value_set=chosen))
    rank = {int(e): i for i, e in enumerate(episodes["episode_index"])}
    keys = np.array([rank[int(e)] for e in table.column(layout.EPISODE_INDEX).to_numpy()], np.int64)
    order = np.lexsort((table.column(layout.FRAME_INDEX).to_numpy(), keys))
    return table.take(pa.array(order))


def _camera_frames(path: Path, info: dict, key: str, frames, episodes: dict[str, list], episode_index: np.ndarray,
                   timestamps: np.ndarray, fps: float) -> np.ndarray:
    """uint8 ``[N, H, W, 3]`` of camera feature ``key`` for every frame row."""
    feature = info["features"][key]
    height, width, _ = image_height_width(feature)
    out = np.empty((frames.num_rows, height, width, 3), np.uint8)
    if feature["dtype"] == "image":
        for row, cell in enumerate(frames.column(key).to_pylist()):
            out[row] = tables.png_image(cell["bytes"])
        return out
    decoded: dict[tuple[int, int], np.ndarray] = {}
    starts = np.searchsorted(episode_index, np.arange(len(episodes["episode_index"])))
    stops = np.searchsorted(episode_index, np.arange(len(episodes["episode_index"])), side="right")
    for e in range(len(episodes["episode_index"])):
        where = (int(episodes[f"videos/{key}/chunk_index"][e]), int(episodes[f"videos/{key}/file_index"][e]))
        if where not in decoded:
            decoded = {where: video.decode_frames(path / layout.file_path(info["video_path"], *where, video_key=key))}
        file_frames = decoded[where]
        rows = slice(int(starts[e]), int(stops[e]))
        start = float(episodes[f"videos/{key}/from_timestamp"][e])
        picks = np.rint((start + timestamps[rows]) * fps).astype(np.int64)
        if len(picks) and (picks.min() < 0 or picks.max() >= len(file_frames)):
            raise RuntimeError(f"{key}: episode {episodes['episode_index'][e]} needs frames {picks.min()}.."
                               f"{picks.max()} of a video with {len(file_frames)}")
        if file_frames.shape[1:3] != (height, width):
            raise RuntimeError(f"{key}: video frames are {file_frames.shape[1:3]}, info.json says {(height, width)}")
        out[rows] = file_frames[picks]
    return out
