"""``gym:<id>`` tasks: any registered Gymnasium env with Box or Discrete spaces behind the VectorEnv interface, its
initial states fixed by seed, its actions offered in the runtime's conventions, bad ids and kwargs refused in one
line."""

import numpy as np
import pytest

import sim_envs
from sim_envs.gymnasium_envs.spaces import ActionSpace


def test_a_gym_id_resolves_to_a_task_with_its_spaces_and_time_limit():
    entry = sim_envs.get_task("gym:CartPole-v1")
    assert (entry.simulator, entry.env_id, entry.discrete_actions, entry.recipe) == ("gymnasium", "CartPole-v1", 2,
                                                                                     "gym")
    assert sim_envs.get_task("gym:Pendulum-v1").discrete_actions == 0
    env = sim_envs.make("gym:CartPole-v1", 3)
    try:
        obs = env.reset(seed=5)
        assert obs.shape == (3, 4) and obs.dtype == np.float32
        assert env.single_action_shape == (2,) and env.max_episode_steps == 500
    finally:
        env.close()


def test_initial_states_repeat_for_their_seeds_across_envs_and_evaluations():
    first, second = sim_envs.make("gym:Pendulum-v1", 2), sim_envs.make("gym:Pendulum-v1", 2)
    try:
        a = first.reset(state_ids=[7, 8])
        b = second.reset(state_ids=[8, 7])
        np.testing.assert_array_equal(a[0], b[1])
        np.testing.assert_array_equal(a[1], b[0])
        assert not np.array_equal(a[0], a[1])
        again = first.reset(state_ids=[7, 7])  # a later evaluation of the same state
        np.testing.assert_array_equal(again[0], a[0])
        np.testing.assert_array_equal(again[1], a[0])
    finally:
        first.close()
        second.close()


def test_discrete_actions_are_one_hot_rows_and_episodes_end_where_the_env_ends_them():
    env = sim_envs.make("gym:CartPole-v1", 1)
    try:
        env.reset(seed=0)
        push_right = np.array([[0.0, 1.0]], np.float32)
        for step in range(1, 500):
            batch = env.step(push_right)  # always right: the pole falls within a few dozen steps
            if batch.terminated[0]:
                break
        assert batch.terminated[0] and not batch.truncated[0] and step < 100
        assert batch.episodes.done[0] and batch.episodes.episode_length[0] == step
        assert batch.episodes.episode_return[0] == pytest.approx(step)  # CartPole pays 1 per step
    finally:
        env.close()


def test_bounded_box_actions_are_offered_in_minus_one_to_one_and_scaled_to_the_env():
    import gymnasium

    actions = ActionSpace(gymnasium.spaces.Box(np.array([-2.0, 0.0]), np.array([2.0, 10.0]), dtype=np.float32), "x")
    assert actions.dim == 2 and actions.low.tolist() == [-1, -1] and actions.high.tolist() == [1, 1]
    np.testing.assert_allclose(actions.to_env(actions.clip(np.array([-1.0, 1.0]))), [-2.0, 10.0])
    np.testing.assert_allclose(actions.to_env(actions.clip(np.array([0.0, 0.5]))), [0.0, 7.5])
    np.testing.assert_allclose(actions.to_env(actions.clip(np.array([5.0, -3.0]))), [2.0, 0.0])  # clipped first
    env = sim_envs.make("gym:Pendulum-v1", 1)
    try:
        env.reset(seed=1)
        env.step(np.array([[-1.0]], np.float32))
        assert env.envs[0].env.unwrapped.last_u == pytest.approx(-2.0)  # Pendulum's max torque
    finally:
        env.close()


def test_discrete_observations_become_one_hot_vectors():
    env = sim_envs.make("gym:FrozenLake-v1", 1, kwargs={"is_slippery": False})
    try:
        obs = env.reset(seed=0)
        assert obs.shape == (1, 16) and obs[0, 0] == 1.0 and obs.sum() == 1.0
        obs = env.step(np.eye(4, dtype=np.float32)[[2]]).obs  # right: state 1
        assert obs[0, 1] == 1.0 and obs.sum() == 1.0
    finally:
        env.close()


@pytest.mark.parametrize("task, overrides, fragment", [
    ("gym:NoSuchEnv-v9", {}, "Gymnasium has no env 'NoSuchEnv-v9'"),
    ("gym:Blackjack-v1", {}, "Tuple observation space; allowed: Box or Discrete"),
    ("gym:Pendulum-v1", {"kwargs": {"gravity": 3.0}}, "env.kwargs.gravity"),
    ("gym:Pendulum-v1", {"obs_mode": "rgb"}, "env.obs_mode='rgb' is not supported for gym: tasks"),
])
def test_bad_ids_spaces_and_options_are_one_line_errors(task, overrides, fragment):
    with pytest.raises(sim_envs.TaskConfigError) as error:
        sim_envs.make(task, 1, **overrides)
    assert fragment in str(error.value) and "\n" not in str(error.value)
