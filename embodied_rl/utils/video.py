"""Evaluation videos: episodes side by side in a grid, each tile framed by how its episode is going, as mp4.

A tile's border says, at every frame, what the episode has shown so far:

* green from the first step at which the task reports success on (``success_once`` reached),
* grey before that, in an episode that succeeds later,
* red for the whole of an episode that never succeeds.

Frames come in as uint8 ``[T, N, H, W, 3]`` (time, episode, image) with success flags ``[T, N]``; the video is
``[T, rows * H, columns * W, 3]``. mp4s are written with imageio's ffmpeg plugin (H.264, yuv420p), atomically.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np

SUCCEEDED = (40, 200, 60)
"""Border of a tile from its episode's first success on."""
NOT_YET = (128, 128, 128)
"""Border before the first success of an episode that succeeds later."""
FAILED = (210, 40, 40)
"""Border of an episode that never succeeds."""


def border_width(height: int) -> int:
    """Border thickness for tiles ``height`` pixels tall (4 px at 128)."""
    return max(2, height // 32)


def mark_episode(frames: np.ndarray, success: np.ndarray, width: int | None = None) -> np.ndarray:
    """A copy of one episode's frames ``[T, H, W, 3]`` with a border coloured by ``success`` ``[T]`` (see the
    module docstring)."""
    frames = np.array(frames, dtype=np.uint8, copy=True)
    success = np.asarray(success, bool)
    if frames.ndim != 4 or len(success) != len(frames):
        raise ValueError(f"frames {frames.shape} and success {success.shape} must be [T, H, W, 3] and [T]")
    width = width or border_width(frames.shape[1])
    colours = np.empty((len(frames), 3), np.uint8)
    if success.any():
        first = int(np.argmax(success))
        colours[:first], colours[first:] = NOT_YET, SUCCEEDED
    else:
        colours[:] = FAILED
    colour = colours[:, None, None, :]
    frames[:, :width], frames[:, -width:] = colour, colour
    frames[:, :, :width], frames[:, :, -width:] = colour, colour
    return frames


def tile_grid(tiles: np.ndarray, columns: int | None = None) -> np.ndarray:
    """Images ``[..., M, H, W, 3]`` laid out row by row in a grid of ``columns`` (default ceil(sqrt(M))):
    ``[..., rows * H, columns * W, 3]``; empty cells are black."""
    tiles = np.asarray(tiles)
    *lead, m, h, w, c = tiles.shape
    columns = columns or math.ceil(math.sqrt(m))
    rows = math.ceil(m / columns)
    padded = np.zeros((*lead, rows * columns, h, w, c), tiles.dtype)
    padded[..., :m, :, :, :] = tiles
    grid = padded.reshape(*lead, rows, columns, h, w, c)
    grid = np.moveaxis(grid, -4, -3)  # [..., rows, h, columns, w, c]
    return grid.reshape(*lead, rows * h, columns * w, c)


def episode_grid(frames: np.ndarray, success: np.ndarray, columns: int | None = None) -> np.ndarray:
    """Video ``[T, rows * H, columns * W, 3]`` of N episodes ``frames`` ``[T, N, H, W, 3]``, each tile marked by
    its ``success`` ``[T, N]``."""
    frames, success = np.asarray(frames), np.asarray(success, bool)
    if frames.ndim != 5 or success.shape != frames.shape[:2]:
        raise ValueError(f"frames {frames.shape} and success {success.shape} must be [T, N, H, W, 3] and [T, N]")
    marked = np.stack([mark_episode(frames[:, i], success[:, i]) for i in range(frames.shape[1])], axis=1)
    return tile_grid(marked, columns)


def write_mp4(path: str | Path, video: np.ndarray, fps: float = 20) -> Path:
    """Write ``video`` uint8 ``[T, H, W, 3]`` to ``path`` as H.264 mp4, atomically (a temporary file in the same
    directory, then a rename). Odd sizes are padded by one black row / column (yuv420p needs even sizes)."""
    import imageio.v2 as imageio

    video = np.asarray(video, np.uint8)
    if video.ndim != 4 or video.shape[-1] != 3 or len(video) == 0:
        raise ValueError(f"video must be uint8 [T, H, W, 3] with T >= 1, got {video.shape}")
    t, h, w, _ = video.shape
    if h % 2 or w % 2:
        video = np.pad(video, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".mp4")
    os.close(fd)
    try:
        with imageio.get_writer(tmp, format="FFMPEG", mode="I", fps=fps, codec="libx264", pixelformat="yuv420p",
                                macro_block_size=1, ffmpeg_log_level="error") as writer:
            for frame in video:
                writer.append_data(frame)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_episode_video(path: str | Path, frames: np.ndarray, success: np.ndarray, fps: float = 20,
                        columns: int | None = None) -> Path:
    """``episode_grid`` of ``frames`` ``[T, N, H, W, 3]`` / ``success`` ``[T, N]`` written to ``path`` as mp4."""
    return write_mp4(path, episode_grid(frames, success, columns), fps)
