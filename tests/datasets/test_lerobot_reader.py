"""``read_lerobot_dataset``: a dataset that does not fit the task is refused with one line naming the feature, the
dataset's shape and the task's; cameras are read only for a camera task; variants lerobot itself writes (plain
lists, channel-first image shapes, no seed column, episodes out of order) read the same; old versions refused."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from synthetic_demos import tiny_demos

from embodied_rl.config import ConfigError
from embodied_rl.datasets.lerobot import TaskSpaces, read_lerobot_dataset, write_lerobot_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Two 8 x 6 cameras, state [4], action [2]."""
    demos = tiny_demos()
    out = tmp_path_factory.mktemp("reader") / "dataset"
    write_lerobot_dataset(demos, out, 10, "do it", camera_names=["left", "right"])
    return demos, out


@pytest.mark.parametrize("spaces,feature,dataset_shape,task_shape", [
    (TaskSpaces("t", 3, 4), "'action'", "[2]", "[3]"),
    (TaskSpaces("t", 2, 5), "'observation.state'", "[4]", "[5]"),
    (TaskSpaces("t", 2, 4, (8, 7, 6)), "'observation.images.left'", "[8, 6, 3]", "[8, 7, 3]"),
    (TaskSpaces("t", 2, 4, (8, 6, 3)), "'observation.images.*'", "2 camera(s)", "1 camera(s) [8, 6, 3]"),
])
def test_a_dataset_that_does_not_fit_the_task_is_refused_in_one_line(dataset, spaces, feature, dataset_shape,
                                                                     task_shape):
    _, out = dataset
    with pytest.raises(ConfigError) as error:
        read_lerobot_dataset(out, spaces, where="algorithm.demos")
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"algorithm.demos={out}: feature {feature}")
    assert f"is {dataset_shape} in the dataset; task 't' takes {task_shape}" in message


def test_a_missing_camera_is_named(tmp_path):
    out = tmp_path / "state_only"
    write_lerobot_dataset(tiny_demos(cameras=0), out, 10, "do it")
    with pytest.raises(ConfigError, match=r"feature 'observation.images.\*' is missing in the dataset; task 't' "
                                          r"takes \[8, 6, 3\]"):
        read_lerobot_dataset(out, TaskSpaces("t", 2, 4, (8, 6, 3)))


def test_cameras_are_read_only_for_a_camera_task(dataset):
    demos, out = dataset
    state_task = read_lerobot_dataset(out, TaskSpaces("t", 2, 4))
    assert state_task.rgb is None
    np.testing.assert_array_equal(state_task.obs, demos.obs)
    camera_task = read_lerobot_dataset(out, TaskSpaces("t", 2, 4, (8, 6, 6)))
    np.testing.assert_array_equal(camera_task.rgb, demos.rgb)
    first_two = read_lerobot_dataset(out, max_episodes=2)
    assert first_two.num_episodes == 2 and first_two.num_steps == 8
    np.testing.assert_array_equal(first_two.rgb, demos.rgb[:8])


def test_variants_lerobot_writes_read_the_same(dataset, tmp_path):
    demos, source = dataset
    out = tmp_path / "variant"
    shutil.copytree(source, out)
    data = out / "data/chunk-000/file-000.parquet"
    table = pq.read_table(data)
    for key in ("observation.state", "action"):  # variable-length lists instead of fixed-size ones
        index = table.column_names.index(key)
        table = table.set_column(index, key, table.column(key).cast(pa.list_(pa.float32())))
    pq.write_table(table, data)
    episodes_path = out / "meta/episodes/chunk-000/file-000.parquet"
    episodes = pq.read_table(episodes_path)
    episodes = episodes.drop_columns(["episode_seed"]).take(pa.array([2, 0, 1]))  # no seeds, rows out of order
    pq.write_table(episodes, episodes_path)
    info = json.loads((out / "meta/info.json").read_text())
    info["features"]["observation.images.left"].update(shape=[3, 8, 6], names=["channels", "height", "width"])
    del info["embodied_rl"]
    (out / "meta/info.json").write_text(json.dumps(info))
    back = read_lerobot_dataset(out, TaskSpaces("t", 2, 4, (8, 6, 6)))
    np.testing.assert_array_equal(back.obs, demos.obs)
    np.testing.assert_array_equal(back.actions, demos.actions)
    np.testing.assert_array_equal(back.rgb, demos.rgb)
    np.testing.assert_array_equal(back.episode_index, demos.episode_index)
    assert back.episode_seeds.tolist() == [-1, -1, -1] and back.env_id == ""


def test_older_versions_and_other_directories_are_refused(dataset, tmp_path):
    _, source = dataset
    out = tmp_path / "old"
    shutil.copytree(source, out)
    info = json.loads((out / "meta/info.json").read_text())
    (out / "meta/info.json").write_text(json.dumps(dict(info, codebase_version="v2.1")))
    with pytest.raises(ConfigError, match="codebase_version v2.1 is not supported; allowed: v3.x"):
        read_lerobot_dataset(out)
    with pytest.raises(ConfigError, match="not a LeRobot dataset"):
        read_lerobot_dataset(tmp_path)


def test_video_frames_are_picked_at_the_nearest_timestamp(tmp_path):
    # float32 timestamps: 7 / 10 is stored as 0.69999999, so frame 7 of an episode must be found by rounding
    demos = tiny_demos(lengths=(9, 4), cameras=1)
    write_lerobot_dataset(demos, tmp_path / "ten", 10, "t")
    np.testing.assert_array_equal(read_lerobot_dataset(tmp_path / "ten").rgb, demos.rgb)
