"""Camera frames as mp4, written and read with the ffmpeg binary that imageio-ffmpeg ships (no PyAV needed).

Written losslessly: H.264 through ``libx264rgb`` at quantiser 0 keeps the frames in RGB (stream pixel format
``gbrp``, High 4:4:4 Predictive profile), so a decoder that converts to RGB24 (ffmpeg, PyAV, torchcodec) returns
exactly the source frames, bit for bit. Every ``KEYFRAME_INTERVAL``-th frame is a key frame and there are no
B-frames, so seeking to a timestamp (as lerobot's decoders do) is cheap and frame ``k`` of a file is shown at
``k / fps`` seconds.

Frames are uint8 ``[T, H, W, 3]`` throughout.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np

CODEC = "h264"
"""The stream's codec as lerobot's ``video.codec`` names it."""
PIXEL_FORMAT = "gbrp"
"""The stream's pixel format (``libx264rgb`` stores planar G, B, R)."""
KEYFRAME_INTERVAL = 2
"""Frames between key frames (lerobot's own default ``g=2``: any frame decodes after at most one other)."""


def ffmpeg_binary() -> str:
    """Path of the ffmpeg executable bundled with imageio-ffmpeg."""
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()


def encode_frames(path: Path, frames: np.ndarray, fps: int) -> dict:
    """Write ``frames`` uint8 ``[T, H, W, 3]`` to the mp4 ``path`` at ``fps``, losslessly.

    Returns the ``info`` entry lerobot keeps in ``meta/info.json`` for the feature (``video.fps``,
    ``video.codec``, ``video.pix_fmt``, ...)."""
    frames = np.ascontiguousarray(frames, dtype=np.uint8)
    if frames.ndim != 4 or frames.shape[-1] != 3 or len(frames) == 0:
        raise ValueError(f"frames must be uint8 [T, H, W, 3] with T >= 1, got {frames.shape}")
    _, height, width, _ = frames.shape
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    command = [ffmpeg_binary(), "-v", "error", "-nostdin", "-y",
               "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-r", str(fps), "-i", "-",
               "-c:v", "libx264rgb", "-qp", "0", "-preset", "medium", "-g", str(KEYFRAME_INTERVAL), "-bf", "0",
               "-pix_fmt", "rgb24", "-movflags", "+faststart", str(path)]
    done = subprocess.run(command, input=frames.tobytes(), capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"ffmpeg could not write {path}: {_last_line(done.stderr)}")
    return video_info(height, width, fps)


def video_info(height: int, width: int, fps: int) -> dict:
    """The ``info`` of a feature whose frames ``encode_frames`` wrote (the keys lerobot's ``get_video_info``
    writes)."""
    return {"video.height": int(height), "video.width": int(width), "video.codec": CODEC,
            "video.pix_fmt": PIXEL_FORMAT, "video.is_depth_map": False, "video.fps": int(fps),
            "video.channels": 3, "has_audio": False}


def decode_frames(path: Path) -> np.ndarray:
    """Every frame of the mp4 ``path`` in presentation order, converted to RGB: uint8 ``[T, H, W, 3]``.

    Any codec the bundled ffmpeg decodes (ours; lerobot's own AV1 and H.264 yuv420p files)."""
    width, height = probe_size(path)
    command = [ffmpeg_binary(), "-v", "error", "-nostdin", "-i", str(path), "-map", "0:v:0",
               "-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"]
    done = subprocess.run(command, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"ffmpeg could not read {path}: {_last_line(done.stderr)}")
    frame_bytes = height * width * 3
    if len(done.stdout) % frame_bytes:
        raise RuntimeError(f"{path}: decoded {len(done.stdout)} bytes, not a whole number of {width}x{height} frames")
    return np.frombuffer(done.stdout, np.uint8).reshape(-1, height, width, 3)


def probe_size(path: Path) -> tuple[int, int]:
    """``(width, height)`` of the first video stream of ``path`` (read from ffmpeg's description of it)."""
    done = subprocess.run([ffmpeg_binary(), "-hide_banner", "-nostdin", "-i", str(path)], capture_output=True)
    text = done.stderr.decode(errors="replace")
    for line in text.splitlines():
        if "Video:" in line:
            match = re.search(r",\s*(\d+)x(\d+)[\s,\[]", line)
            if match:
                return int(match.group(1)), int(match.group(2))
    raise RuntimeError(f"{path}: no video stream found ({_last_line(text.encode())})")


def _last_line(stderr: bytes) -> str:
    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no message"
