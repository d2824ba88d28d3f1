"""The demonstrations loader on hand-written ManiSkill-format files (no simulator) and action chunks by hand."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from embodied_rl.demos import action_chunks, load_demos


def test_action_chunks_pad_with_the_last_action_of_the_episode():
    actions = np.array([[0.0], [1.0], [2.0], [10.0], [11.0]], np.float32)
    episode_index = np.array([0, 0, 0, 1, 1])
    chunks, mask = action_chunks(actions, episode_index, 3)
    assert chunks.shape == (5, 3, 1) and mask.shape == (5, 3)
    np.testing.assert_array_equal(chunks[..., 0], [[0, 1, 2], [1, 2, 2], [2, 2, 2], [10, 11, 11], [11, 11, 11]])
    np.testing.assert_array_equal(mask, [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 0, 0]])
    single, single_mask = action_chunks(actions, episode_index, 1)
    np.testing.assert_array_equal(single[:, 0], actions)
    assert single_mask.all()
    with pytest.raises(ValueError):
        action_chunks(actions, episode_index, 0)


def _write(directory, name, episodes):
    """``episodes``: list of (seed, obs writer, steps); actions are step + 100 * episode."""
    h5_path = directory / f"{name}.h5"
    entries = []
    with h5py.File(h5_path, "w") as file:
        for i, (seed, write_obs, steps, success) in enumerate(episodes):
            group = file.create_group(f"traj_{i}")
            group["actions"] = (np.arange(steps, dtype=np.float32)[:, None] + 100 * i).repeat(2, 1)
            group["rewards"] = np.full(steps, 0.5, np.float32)
            group["success"] = np.arange(steps) == steps - 1 if success else np.zeros(steps, bool)
            write_obs(group, steps + 1)
            entries.append(dict(episode_id=i, episode_seed=seed, control_mode="pd_joint_delta_pos",
                                elapsed_steps=steps, reset_kwargs=dict(seed=seed), success=success))
    meta = dict(env_info=dict(env_id="PushCube-v1", env_kwargs=dict(obs_mode="rgb"), max_episode_steps=50),
                episodes=entries)
    h5_path.with_suffix(".json").write_text(json.dumps(meta))
    return h5_path


def _flat(group, n):
    group["obs"] = np.arange(n * 3, dtype=np.float32).reshape(n, 3)


def _flattened_rgb(group, n):
    group["obs/state"] = np.ones((n, 3), np.float32)
    group["obs/rgb"] = np.full((n, 4, 4, 3), 7, np.uint8)


def _raw_dict(group, n):  # ManiSkill's unflattened obs: agent/extra leaves, sensor_data/<camera>/rgb
    group["obs/agent/qpos"] = np.zeros((n, 2), np.float32)
    group["obs/agent/qvel"] = np.ones((n, 1), np.float32)
    group["obs/extra/is_grasped"] = np.ones((n,), bool)
    group["obs/sensor_data/base_camera/rgb"] = np.full((n, 4, 4, 3), 9, np.uint8)
    group["obs/sensor_param/base_camera/intrinsic_cv"] = np.zeros((n, 3, 3), np.float32)


def test_flat_state_demos_load_into_rows(tmp_path):
    path = _write(tmp_path, "demo", [(5, _flat, 3, True), (6, _flat, 2, False)])
    demos = load_demos(path)
    assert demos.num_steps == 5 and demos.num_episodes == 2
    np.testing.assert_array_equal(demos.episode_index, [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(demos.step_index, [0, 1, 2, 0, 1])
    np.testing.assert_array_equal(demos.episode_seeds, [5, 6])
    np.testing.assert_array_equal(demos.episode_lengths, [3, 2])
    assert demos.obs.shape == (5, 3) and demos.obs.dtype == np.float32
    np.testing.assert_array_equal(demos.obs[3], [0, 1, 2])  # the final observation of episode 0 is dropped
    np.testing.assert_array_equal(demos.actions[:, 0], [0, 1, 2, 100, 101])
    assert demos.rgb is None and demos.rewards.shape == (5,) and demos.success.sum() == 1
    assert demos.control_mode == "pd_joint_delta_pos" and demos.env_id == "PushCube-v1"
    only = load_demos(path, success_only=True)
    assert only.num_episodes == 1 and only.num_steps == 3
    assert load_demos(tmp_path, max_episodes=1).num_steps == 3  # a directory with one .h5


@pytest.mark.parametrize("writer, state, pixel", [(_flattened_rgb, [1, 1, 1], 7), (_raw_dict, [0, 0, 1, 1], 9)])
def test_camera_demos_load_state_and_rgb(tmp_path, writer, state, pixel):
    demos = load_demos(_write(tmp_path, "demo", [(0, writer, 2, True)]))
    np.testing.assert_array_equal(demos.obs, [state, state])
    assert demos.rgb.shape == (2, 4, 4, 3) and demos.rgb.dtype == np.uint8 and (demos.rgb == pixel).all()


def test_a_directory_without_demos_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no demonstrations at"):
        load_demos(tmp_path)
