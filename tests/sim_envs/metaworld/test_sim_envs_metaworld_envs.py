"""MetaWorld tasks through ``sim_envs.make``: real MetaWorld and MuJoCo, no mocks."""

import numpy as np
import pytest

import sim_envs
from sim_envs.metaworld.tasks import INSTRUCTIONS, MT10, task_name


def test_all_fifty_tasks_are_registered_as_builtin_metaworld_tasks():
    names = [task_name(env_id) for env_id in INSTRUCTIONS]
    assert len(names) == 50 and set(names) <= set(sim_envs.list_tasks())
    assert {task_name(e) for e in MT10} >= {"metaworld_reach", "metaworld_push", "metaworld_pick_place",
                                             "metaworld_drawer_open"}
    entry = sim_envs.get_task("metaworld_pick_place")
    assert (entry.simulator, entry.env_id, entry.builtin) == ("metaworld", "pick-place-v3", True)


def test_state_shapes_dtypes_and_the_standard_time_limit():
    env = sim_envs.make("metaworld_reach", 3)
    try:
        obs = env.reset()
        assert obs.shape == (3, 39) and obs.dtype == np.float32
        assert env.single_action_shape == (4,) and env.max_episode_steps == 500
        batch = env.step(np.zeros((3, 4), np.float32))
        assert batch.obs.shape == (3, 39) and batch.rewards.shape == (3,) and batch.rewards.dtype == np.float32
        assert batch.success.dtype == bool and not batch.terminated.any() and not batch.truncated.any()
        assert np.all((batch.rewards >= 0) & (batch.rewards <= 1))  # normalized_dense: MetaWorld's [0, 10] / 10
    finally:
        env.close()


def test_seeded_initial_states_repeat_and_differ_across_seeds():
    env = sim_envs.make("metaworld_push", 4)
    other = sim_envs.make("metaworld_push", 2)
    try:
        obs = env.reset(state_ids=[100, 100, 101, 102])
        assert np.array_equal(obs[0], obs[1])  # one state id, one initial state
        goal, puck = obs[:, -3:], obs[:, 4:7]
        assert not np.allclose(goal[0], goal[2]) and not np.allclose(puck[2], puck[3])  # the task's randomisation
        again = other.reset(state_ids=[101, 100])  # another vector env, another order: the same states
        assert np.array_equal(again[0], obs[2]) and np.array_equal(again[1], obs[0])
    finally:
        env.close()
        other.close()


def test_time_limit_truncates_with_the_final_observation_and_autoresets():
    env = sim_envs.make("metaworld_reach", 2, max_episode_steps=5, seed=7)
    try:
        first = env.reset()
        for _ in range(4):
            batch = env.step(np.zeros((2, 4), np.float32))
            assert not batch.truncated.any()
        batch = env.step(np.ones((2, 4), np.float32))
        assert batch.truncated.all() and not batch.terminated.any()
        assert batch.episodes.done.all() and (batch.episodes.episode_length == 5).all()
        assert not np.array_equal(batch.final_obs, batch.obs)  # obs: the next episode's first
        assert not np.array_equal(batch.obs[0], first[0])  # its seed is 7 + 2, not 7 again
    finally:
        env.close()


def test_the_scripted_policy_succeeds_and_success_is_reported_like_maniskills():
    from metaworld.policies import ENV_POLICY_MAP

    env = sim_envs.make("metaworld_reach", 1, seed=3)
    policy = ENV_POLICY_MAP["reach-v3"]()
    try:
        obs = env.reset()
        for step in range(500):
            batch = env.step(policy.get_action(obs[0].astype(np.float64))[None].astype(np.float32))
            obs = batch.obs
            if batch.episodes.done[0]:
                break
        assert batch.terminated[0] and batch.success[0]  # an episode ends at its first success step
        assert batch.episodes.success_once[0] and batch.episodes.success_at_end[0]
        assert step < 150, step
    finally:
        env.close()


def test_ignore_terminations_runs_past_success():
    env = sim_envs.make("metaworld_reach", 1, ignore_terminations=True, max_episode_steps=3, reward_mode="sparse")
    try:
        env.reset()
        batch = env.step(np.zeros((1, 4), np.float32))
        assert not batch.terminated[0] and batch.rewards[0] in (0.0, 1.0)
    finally:
        env.close()


def test_snapshot_restore_rebuilds_the_exact_state():
    rng = np.random.default_rng(0)
    env = sim_envs.make("metaworld_push", 2, seed=11)
    copy = sim_envs.make("metaworld_push", 2, seed=99)
    try:
        env.reset()
        for _ in range(7):
            env.step(rng.uniform(-1, 1, (2, 4)).astype(np.float32))
        restored = copy.restore(env.snapshot())
        actions = rng.uniform(-1, 1, (2, 4)).astype(np.float32)
        a, b = env.step(actions), copy.step(actions)
        assert np.array_equal(a.obs, b.obs) and np.array_equal(a.rewards, b.rewards)
        assert restored.shape == (2, 39)
    finally:
        env.close()
        copy.close()


def test_rgb_observations_carry_the_image_the_state_and_the_instruction():
    env = sim_envs.make("metaworld_drawer_open", 2, obs_mode="rgb", image_size=32)
    try:
        obs = env.reset()
        assert obs["rgb"].shape == (2, 32, 32, 3) and obs["rgb"].dtype == np.uint8
        assert obs["state"].shape == (2, 39) and list(obs["instruction"]) == ["open the drawer"] * 2
        assert obs["rgb"].std() > 10  # a scene, not a blank frame
        held = env.step(np.ones((2, 4), np.float32), observe=False)
        assert np.array_equal(held.obs["rgb"], obs["rgb"])  # not rendered: the last image again
        fresh = env.step(np.ones((2, 4), np.float32))
        assert not np.array_equal(fresh.obs["rgb"], obs["rgb"])  # the arm moved
    finally:
        env.close()


@pytest.mark.parametrize("overrides, fragment", [
    (dict(obs_mode="depth"), "obs_mode='depth' is not supported for MetaWorld tasks; allowed: state, rgb"),
    (dict(control_mode="pd_joint_delta_pos"), "control_mode='pd_joint_delta_pos'"),
    (dict(backend="gpu"), "backend='gpu'"),
    (dict(colour="red"), "unknown env option 'colour'"),
    (dict(processes=True), "processes=True"),
])
def test_bad_options_are_one_line_errors(overrides, fragment):
    with pytest.raises(sim_envs.TaskConfigError) as error:
        sim_envs.make("metaworld_reach", 1, **overrides)
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_an_unknown_metaworld_task_names_the_available_ones():
    with pytest.raises(sim_envs.TaskConfigError, match="unknown task 'metaworld_fly'.*metaworld_reach"):
        sim_envs.make("metaworld_fly", 1)
