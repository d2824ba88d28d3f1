"""ManiSkill envs built with render_size render their human render camera; state-only envs refuse to."""

import numpy as np
import pytest

import sim_envs


def test_a_rendering_env_films_its_steps_and_a_state_env_says_how_to_get_one():
    env = sim_envs.make("maniskill_pushcube", 1, processes=False, render_size=64, max_episode_steps=20)
    try:
        env.reset(seed=0)
        first = env.render()
        assert first.shape == (1, 64, 64, 3) and first.dtype == np.uint8
        assert first.std() > 5  # a scene, not a blank image
        action = np.full((1, *env.single_action_shape), 0.5, np.float32)
        for _ in range(10):
            env.step(action)
        last = env.render()
        assert np.abs(last.astype(int) - first).mean() > 0.5  # the arm moved
    finally:
        env.close()
    state_only = sim_envs.make("maniskill_pushcube", 1, processes=False)
    try:
        with pytest.raises(RuntimeError, match="render_size"):
            state_only.render()
    finally:
        state_only.close()


def test_negative_render_size_is_a_config_error():
    with pytest.raises(sim_envs.TaskConfigError, match="render_size"):
        sim_envs.make("maniskill_pushcube", 1, processes=False, render_size=-1)
