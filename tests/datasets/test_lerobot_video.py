"""Camera frames through mp4 and back: bit-exact (lossless H.264 in RGB), any frame size, one frame per 1/fps."""

from __future__ import annotations

import numpy as np
import pytest

from embodied_rl.datasets.lerobot import video


@pytest.mark.parametrize("height,width", [(8, 6), (7, 5), (64, 64)])
def test_frames_equal_after_the_video_round_trip(tmp_path, height, width):
    rng = np.random.default_rng(height)
    noise = rng.integers(0, 256, (9, height, width, 3), dtype=np.uint8)
    ramp = np.broadcast_to(np.linspace(0, 255, width, dtype=np.uint8)[None, None, :, None], (4, height, width, 3))
    frames = np.concatenate([noise, ramp + np.arange(4, dtype=np.uint8)[:, None, None, None]])
    info = video.encode_frames(tmp_path / "v.mp4", frames, fps=20)
    decoded = video.decode_frames(tmp_path / "v.mp4")
    assert decoded.shape == frames.shape and decoded.dtype == np.uint8
    np.testing.assert_array_equal(decoded, frames)
    assert info["video.fps"] == 20 and (info["video.height"], info["video.width"]) == (height, width)
    assert video.probe_size(tmp_path / "v.mp4") == (width, height)


def test_bad_frames_are_refused(tmp_path):
    with pytest.raises(ValueError):
        video.encode_frames(tmp_path / "v.mp4", np.zeros((2, 4, 4), np.uint8), fps=20)
