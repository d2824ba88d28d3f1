"""Where things live in a LeRobotDataset v3.0 directory, and the names of its features.

A dataset directory (lerobot's own layout, read by ``lerobot.datasets.LeRobotDataset(repo_id, root=DIR)``)::

    meta/info.json                              codebase_version "v3.0", fps, features, path templates, totals
    meta/stats.json                             per feature: min, max, mean, std, count, q01 ... q99
    meta/tasks.parquet                          one row per distinct task text: its task_index
    meta/episodes/chunk-000/file-000.parquet    one row per episode: length, frame range, files, per-episode stats
    data/chunk-000/file-000.parquet             one row per frame: every non-video feature
    videos/<video key>/chunk-000/file-000.mp4   the frames of a camera, episodes one after another

Frames of several episodes share a file; ``chunks_size`` files make a chunk (``chunk-001`` ...).
"""

from __future__ import annotations

from pathlib import Path

CODEBASE_VERSION = "v3.0"
"""The format version written in ``meta/info.json`` (lerobot 0.4 reads v3.0)."""

INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
FILE_PATTERN = "chunk-{chunk_index:03d}/file-{file_index:03d}"
EPISODES_PATH = EPISODES_DIR + "/" + FILE_PATTERN + ".parquet"
DATA_PATH = "data/" + FILE_PATTERN + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + FILE_PATTERN + ".mp4"

DEFAULT_CHUNK_SIZE = 1000
"""Files per chunk directory (lerobot's default)."""
DEFAULT_DATA_FILE_SIZE_MB = 100
DEFAULT_VIDEO_FILE_SIZE_MB = 200

STATE = "observation.state"
"""``[D]`` float32: the state vector an action was chosen from."""
IMAGES_PREFIX = "observation.images."
"""``observation.images.<camera>``: ``[H, W, 3]`` uint8 frames, as video (``dtype: video``) or PNG (``image``)."""
ACTION = "action"
"""``[A]`` float32."""
REWARD = "next.reward"
"""``[1]`` float32: the reward after the action."""
SUCCESS = "next.success"
"""``[1]`` bool: the task is solved after the action."""
DONE = "next.done"
"""``[1]`` bool: the action is the episode's last."""

TIMESTAMP, FRAME_INDEX, EPISODE_INDEX, INDEX, TASK_INDEX = (
    "timestamp", "frame_index", "episode_index", "index", "task_index")
INDEX_FEATURES = {
    TIMESTAMP: {"dtype": "float32", "shape": [1], "names": None},
    FRAME_INDEX: {"dtype": "int64", "shape": [1], "names": None},
    EPISODE_INDEX: {"dtype": "int64", "shape": [1], "names": None},
    INDEX: {"dtype": "int64", "shape": [1], "names": None},
    TASK_INDEX: {"dtype": "int64", "shape": [1], "names": None},
}
"""The bookkeeping features every LeRobot frame carries (``timestamp`` = ``frame_index / fps``)."""

EPISODE_SEED = "episode_seed"
"""Our extra column of the episodes table: the reset seed of each episode (lerobot keeps extra columns)."""
SOURCE_KEY = "embodied_rl"
"""Our extra entry of ``meta/info.json``: env id, control mode, obs mode and task of the episodes."""


def is_lerobot_dataset(path: str | Path) -> bool:
    """Whether ``path`` is a LeRobot dataset directory (it has ``meta/info.json``)."""
    return (Path(path) / INFO_PATH).is_file()


def file_path(template: str, chunk_index: int, file_index: int, video_key: str | None = None) -> str:
    """``template`` (``DATA_PATH``, ``VIDEO_PATH``, ``EPISODES_PATH`` or a dataset's own) filled in."""
    values = dict(chunk_index=chunk_index, file_index=file_index)
    if video_key is not None:
        values["video_key"] = video_key
    return template.format(**values)


def chunk_and_file(file_number: int, chunks_size: int) -> tuple[int, int]:
    """The ``(chunk_index, file_index)`` of the ``file_number``-th file (0-based) of one kind."""
    return divmod(file_number, chunks_size)
