"""``write_lerobot_dataset``: lerobot's v3.0 layout, features, dtypes, fps, episode boundaries, tasks and
statistics (checked against numpy by hand), read back by our reader; refused and interrupted writes leave the
target as it was."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from synthetic_demos import tiny_demos

from embodied_rl.config import ConfigError
from embodied_rl.datasets.lerobot import read_lerobot_dataset, write_lerobot_dataset
from embodied_rl.datasets.lerobot import video as video_module

FPS = 15
CAMERAS = ["wrist", "top"]
INSTRUCTIONS = ["pick the cube", "push the cube", "pick the cube"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    demos = tiny_demos()
    out = tmp_path_factory.mktemp("lerobot") / "dataset"
    result = write_lerobot_dataset(demos, out, FPS, INSTRUCTIONS, camera_names=CAMERAS)
    return demos, out, result


def _frames(out) -> pa.Table:
    return pq.read_table(out / "data/chunk-000/file-000.parquet")


def test_info_json_declares_lerobot_v3_features_and_totals(written):
    _, out, result = written
    info = json.loads((out / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == FPS
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, 12, 2)
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    features = info["features"]
    expected = {"observation.state": ("float32", [4]), "observation.images.wrist": ("video", [8, 6, 3]),
                "observation.images.top": ("video", [8, 6, 3]), "action": ("float32", [2]),
                "next.reward": ("float32", [1]), "next.success": ("bool", [1]), "next.done": ("bool", [1]),
                "timestamp": ("float32", [1]), "frame_index": ("int64", [1]), "episode_index": ("int64", [1]),
                "index": ("int64", [1]), "task_index": ("int64", [1])}
    assert {k: (f["dtype"], f["shape"]) for k, f in features.items()} == expected
    assert features["observation.images.top"]["info"]["video.fps"] == FPS
    assert result.cameras == ["observation.images.wrist", "observation.images.top"] and result.files == 1


def test_frames_table_columns_dtypes_and_episode_boundaries(written):
    demos, out, _ = written
    table = _frames(out)
    assert set(table.column_names) == {"observation.state", "action", "next.reward", "next.success", "next.done",
                                       "timestamp", "frame_index", "episode_index", "index", "task_index"}
    assert table.schema.field("observation.state").type == pa.list_(pa.float32(), 4)
    assert table.schema.field("action").type == pa.list_(pa.float32(), 2)
    assert table.schema.field("next.success").type == pa.bool_()
    assert table.schema.field("timestamp").type == pa.float32()
    np.testing.assert_array_equal(np.stack(table.column("observation.state").to_numpy(zero_copy_only=False)),
                                  demos.obs)
    frame_index = table.column("frame_index").to_numpy()
    np.testing.assert_array_equal(frame_index, [0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3])
    np.testing.assert_array_equal(table.column("episode_index").to_numpy(), demos.episode_index)
    np.testing.assert_array_equal(table.column("index").to_numpy(), np.arange(12))
    np.testing.assert_allclose(table.column("timestamp").to_numpy(), frame_index / FPS, rtol=1e-6)
    np.testing.assert_array_equal(np.flatnonzero(table.column("next.done").to_numpy()), [4, 7, 11])
    np.testing.assert_array_equal(table.column("task_index").to_numpy(), np.repeat([0, 1, 0], [5, 3, 4]))

    tasks = pd.read_parquet(out / "meta/tasks.parquet")  # as lerobot reads it: texts are the index
    assert list(tasks.index) == ["pick the cube", "push the cube"] and list(tasks.task_index) == [0, 1]

    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert episodes["episode_index"] == [0, 1, 2] and episodes["length"] == [5, 3, 4]
    assert episodes["dataset_from_index"] == [0, 5, 8] and episodes["dataset_to_index"] == [5, 8, 12]
    assert episodes["tasks"] == [[t] for t in INSTRUCTIONS] and episodes["episode_seed"] == [100, 101, 102]
    np.testing.assert_allclose(episodes["videos/observation.images.top/from_timestamp"], [0, 5 / FPS, 8 / FPS])
    np.testing.assert_allclose(episodes["videos/observation.images.top/to_timestamp"], [5 / FPS, 8 / FPS, 12 / FPS])


def test_reads_back_what_was_written(written):
    demos, out, _ = written
    back = read_lerobot_dataset(out)
    for key in ("obs", "actions", "episode_index", "step_index", "rgb", "rewards", "success", "episode_seeds"):
        assert getattr(back, key).dtype == getattr(demos, key).dtype, key
        np.testing.assert_array_equal(getattr(back, key), getattr(demos, key), err_msg=key)
    assert (back.env_id, back.control_mode, back.obs_mode) == (demos.env_id, demos.control_mode, demos.obs_mode)


def _by_hand(values: np.ndarray) -> dict:
    values = values.reshape(len(values), -1).astype(np.float64)
    return {"min": values.min(0), "max": values.max(0), "mean": values.mean(0), "std": values.std(0),
            "count": [len(values)], **{f"q{int(q * 100):02d}": np.quantile(values, q, axis=0)
                                       for q in (0.01, 0.10, 0.50, 0.90, 0.99)}}


def test_statistics_match_numpy_by_hand(written):
    demos, out, _ = written
    stats = json.loads((out / "meta/stats.json").read_text())
    expected = {"observation.state": _by_hand(demos.obs), "action": _by_hand(demos.actions),
                "next.reward": _by_hand(demos.rewards), "next.success": _by_hand(demos.success),
                "frame_index": _by_hand(demos.step_index)}
    for feature, values in expected.items():
        assert set(stats[feature]) == set(values), feature
        for key, value in values.items():
            np.testing.assert_allclose(stats[feature][key], value, rtol=1e-6, atol=1e-12, err_msg=f"{feature} {key}")
    top = demos.rgb[..., 3:6].reshape(-1, 3).astype(np.float64) / 255.0  # camera "top": channels 3..5
    image = stats["observation.images.top"]
    assert np.asarray(image["mean"]).shape == (3, 1, 1) and image["count"] == [12]
    np.testing.assert_allclose(np.asarray(image["mean"]).ravel(), top.mean(0), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(image["std"]).ravel(), top.std(0), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(image["min"]).ravel(), top.min(0))
    np.testing.assert_allclose(np.asarray(image["q99"]).ravel(), np.quantile(top, 0.99, axis=0), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(image["q01"]).ravel(), np.quantile(top, 0.01, axis=0), rtol=1e-9)

    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    second = demos.actions[5:8].astype(np.float64)  # episode 1's own statistics
    np.testing.assert_allclose(episodes["stats/action/mean"][1], second.mean(0), rtol=1e-9)
    np.testing.assert_allclose(episodes["stats/action/q50"][1], np.median(second, 0), rtol=1e-9)
    wrist = demos.rgb[5:8, :, :, 0:3].reshape(-1, 3) / 255.0
    np.testing.assert_allclose(np.asarray(episodes["stats/observation.images.wrist/std"][1]).ravel(), wrist.std(0),
                               rtol=1e-9)


def test_files_hold_whole_episodes_and_roll_over(tmp_path):
    demos = tiny_demos()
    out = tmp_path / "rolled"
    result = write_lerobot_dataset(demos, out, FPS, "t", max_file_frames=8)
    assert result.files == 2
    assert _frames(out).num_rows == 8 and pq.read_table(out / "data/chunk-000/file-001.parquet").num_rows == 4
    assert (out / "videos/observation.images.camera_1/chunk-000/file-001.mp4").is_file()
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert episodes["data/file_index"] == [0, 0, 1]
    np.testing.assert_allclose(episodes["videos/observation.images.camera_0/from_timestamp"], [0, 5 / FPS, 0])
    np.testing.assert_array_equal(read_lerobot_dataset(out).rgb, demos.rgb)


def test_png_images_in_the_parquet_round_trip_exactly(tmp_path):
    demos = tiny_demos(cameras=1, height=5, width=7)
    out = tmp_path / "png"
    write_lerobot_dataset(demos, out, FPS, "t", image_storage="image")
    info = json.loads((out / "meta/info.json").read_text())
    assert info["features"]["observation.images.camera_0"]["dtype"] == "image" and info["video_path"] is None
    assert not (out / "videos").exists()
    cell = _frames(out).column("observation.images.camera_0")[0].as_py()
    assert cell["bytes"][:8] == b"\x89PNG\r\n\x1a\n"
    np.testing.assert_array_equal(read_lerobot_dataset(out).rgb, demos.rgb)


def test_refuses_a_non_empty_directory_and_leaves_it_untouched(tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError) as error:
        write_lerobot_dataset(tiny_demos(), out, FPS, "t")
    assert "\n" not in str(error.value) and "already exists and is not empty" in str(error.value)
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_an_interrupted_write_leaves_nothing_behind(tmp_path, monkeypatch):
    real = video_module.encode_frames
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) % 2 == 0:  # the second camera of each write
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(video_module, "encode_frames", interrupted)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(KeyboardInterrupt):
        write_lerobot_dataset(tiny_demos(), empty, FPS, "t")
    with pytest.raises(KeyboardInterrupt):
        write_lerobot_dataset(tiny_demos(), tmp_path / "new", FPS, "t")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"] and not any(empty.iterdir())
