"""Evaluation videos: the tile grid, the success borders, and mp4s that read back."""

import numpy as np
import pytest

from embodied_rl.utils.video import (FAILED, NOT_YET, SUCCEEDED, border_width, episode_grid, tile_grid,
                                     write_episode_video, write_mp4)


def _episodes(steps=3, count=3, size=16):
    """Frames [T, N, H, W, 3] whose tile n is filled with the value 10 * (n + 1)."""
    frames = np.zeros((steps, count, size, size, 3), np.uint8)
    for n in range(count):
        frames[:, n] = 10 * (n + 1)
    return frames


def test_tiles_go_row_by_row_and_empty_cells_are_black():
    grid = tile_grid(_episodes()[0])  # 3 tiles -> 2 x 2
    assert grid.shape == (32, 32, 3)
    assert grid[8, 8, 0] == 10 and grid[8, 24, 0] == 20 and grid[24, 8, 0] == 30 and grid[24, 24, 0] == 0
    assert tile_grid(_episodes()[0], columns=3).shape == (16, 48, 3)


def test_borders_turn_green_from_the_first_success_and_red_when_an_episode_never_succeeds():
    success = np.array([[False, False, False],   # t=0
                        [True, False, False],    # t=1: episode 0 succeeds
                        [False, False, True]])   # t=2: episode 2 succeeds; episode 0 lost it again
    video = episode_grid(_episodes(), success)
    assert video.shape == (3, 32, 32, 3)
    w = border_width(16)
    corner = {0: (0, 0), 1: (0, 16), 2: (16, 0)}  # top-left pixel of each tile

    def border(t, n):
        y, x = corner[n]
        return tuple(video[t, y, x]), tuple(video[t, y + 8, x + w - 1]), tuple(video[t, y + 15, x + 8])

    assert border(0, 0) == (NOT_YET,) * 3 and border(1, 0) == (SUCCEEDED,) * 3 and border(2, 0) == (SUCCEEDED,) * 3
    assert all(border(t, 1) == (FAILED,) * 3 for t in range(3))
    assert border(1, 2) == (NOT_YET,) * 3 and border(2, 2) == (SUCCEEDED,) * 3
    # inside the border the frame is untouched
    assert video[0, w, w, 0] == 10 and video[0, 8, 24, 0] == 20 and video[0, 16 + 8, 8, 0] == 30


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="success"):
        episode_grid(_episodes(), np.zeros((3, 2), bool))


def test_mp4_reads_back_with_its_frame_count_and_size(tmp_path):
    import imageio.v2 as imageio

    frames = _episodes(steps=12, count=4, size=32)
    frames[:, :, :, :16] = 200  # some structure for the encoder
    path = write_episode_video(tmp_path / "videos" / "eval.mp4", frames, np.zeros((12, 4), bool))
    reader = imageio.get_reader(path)
    decoded = [frame for frame in reader]
    reader.close()
    assert len(decoded) == 12 and decoded[0].shape == (64, 64, 3)
    assert abs(int(decoded[0][0, 0, 0]) - FAILED[0]) < 30  # the red border survives compression
    assert [p.name for p in path.parent.iterdir()] == ["eval.mp4"]  # no temporary file left behind


def test_odd_sizes_are_padded_to_even(tmp_path):
    import imageio.v2 as imageio

    path = write_mp4(tmp_path / "odd.mp4", np.full((3, 15, 21, 3), 90, np.uint8), fps=10)
    assert imageio.get_reader(path).get_data(0).shape == (16, 22, 3)
