"""The ManiSkill adapter on the real simulator (CPU backend)."""

import numpy as np
import pytest

import sim_envs


@pytest.fixture(scope="module")
def two_envs():
    env = sim_envs.make("maniskill_pushcube", 2, processes=False, max_episode_steps=6)
    yield env
    env.close()


def test_shapes_and_dtypes(two_envs):
    obs = two_envs.reset(seed=1)
    assert obs.shape == (2, 35) and obs.dtype == np.float32
    batch = two_envs.step(np.zeros((2, *two_envs.single_action_shape), np.float32))
    assert batch.obs.shape == (2, 35)
    assert batch.rewards.shape == (2,) and batch.rewards.dtype == np.float32
    assert batch.terminated.dtype == bool and batch.truncated.dtype == bool


def test_same_state_id_gives_same_initial_state_and_different_ids_differ(two_envs):
    obs = two_envs.reset(state_ids=[11, 11])
    np.testing.assert_allclose(obs[0], obs[1])
    again = two_envs.reset(state_ids=[11, 12])
    np.testing.assert_allclose(again[0], obs[0])
    assert not np.allclose(again[0], again[1])


def test_truncation_is_reported_apart_from_termination_with_the_final_observation(two_envs):
    two_envs.reset(seed=3)
    zeros = np.zeros((2, *two_envs.single_action_shape), np.float32)
    for step in range(5):
        batch = two_envs.step(zeros)
        assert not batch.truncated.any(), f"truncated early at step {step}"
    batch = two_envs.step(zeros)  # step 6 hits the 6-step limit
    assert batch.truncated.all()
    assert not batch.terminated.any()  # a zero action does not solve the task
    assert batch.episodes.done.all() and (batch.episodes.episode_length == 6).all()
    # Same-step autoreset: obs is the new episode's first observation, final_obs the old episode's last.
    assert not np.allclose(batch.obs, batch.final_obs)


def test_process_vector_env_matches_in_process_env_for_the_same_seeds():
    in_process = sim_envs.make("maniskill_pushcube", 2, processes=False)
    processes = sim_envs.make("maniskill_pushcube", 2, processes=True)
    try:
        np.testing.assert_allclose(in_process.reset(state_ids=[5, 6]), processes.reset(state_ids=[5, 6]),
                                   atol=1e-5)
        actions = np.random.default_rng(0).uniform(-1, 1, (2, *in_process.single_action_shape)).astype(np.float32)
        a, b = in_process.step(actions), processes.step(actions)
        np.testing.assert_allclose(a.obs, b.obs, atol=1e-4)
        np.testing.assert_allclose(a.rewards, b.rewards, atol=1e-4)
    finally:
        in_process.close()
        processes.close()


def test_rgb_observations():
    env = sim_envs.make("maniskill_pickcube", 1, processes=False, obs_mode="rgb", image_size=32)
    try:
        obs = env.reset(seed=0)
        assert obs["rgb"].shape == (1, 32, 32, 3) and obs["rgb"].dtype == np.uint8
        assert obs["rgb"].std() > 0  # a rendered scene, not a blank image
        assert obs["state"].ndim == 2
    finally:
        env.close()


def _first_obs(seed: int) -> np.ndarray:
    env = sim_envs.make("maniskill_pickcube", 1, processes=False, seed=seed)
    try:
        return env.reset()[0]
    finally:
        env.close()


def test_seed_stride_sets_the_seeds_of_later_episodes():
    # One in-process env from seed 5 with stride 3: its second episode starts as a fresh env reset with seed 8.
    env = sim_envs.make("maniskill_pickcube", 1, processes=False, seed=5, seed_stride=3, max_episode_steps=1)
    try:
        env.reset()
        second = env.step(np.zeros((1, *env.single_action_shape), np.float32)).obs[0]
    finally:
        env.close()
    np.testing.assert_allclose(second, _first_obs(8), atol=1e-6)
    assert not np.allclose(second, _first_obs(6), atol=1e-4)
