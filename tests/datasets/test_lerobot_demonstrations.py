"""``algorithm.demos=DIR`` with a LeRobot dataset: the SFT stage's rows and RLPD's transitions come from it, a
dataset that does not fit the task is refused in one line, and the task's shapes are measured on its env when no
worker has reported them."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic_demos import tiny_demos

from embodied_rl.config import ConfigError
from embodied_rl.config.loader import load_train_config
from embodied_rl.datasets.lerobot import TaskSpaces, write_lerobot_dataset
from embodied_rl.runners.demonstrations import load_demo_transitions, load_sft_demonstrations, task_spaces

SPEC = dict(name="mlp", obs_dim=4, action_dim=2)
"""What the env workers would report for a task whose state is [4] and action [2]."""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    demos = tiny_demos(cameras=0)
    out = tmp_path_factory.mktemp("demos") / "lerobot"
    write_lerobot_dataset(demos, out, 20, "push the cube")
    return demos, out


def _config(algorithm: str, path, *extra):
    return load_train_config("maniskill_pushcube", overrides=[f"algorithm.name={algorithm}",
                                                              f"algorithm.demos={path}", *extra])


def test_sft_trains_on_the_dataset_rows(dataset):
    demos, out = dataset
    rows = load_sft_demonstrations(_config("sft", out), SPEC)
    np.testing.assert_array_equal(rows["obs"], demos.obs)
    np.testing.assert_array_equal(rows["actions"], demos.actions)


def test_demo_path_takes_a_lerobot_directory_too(dataset):
    demos, out = dataset
    config = load_train_config("maniskill_pushcube", overrides=["algorithm.name=sft", "algorithm.demo_source=path",
                                                                 f"algorithm.demo_path={out}"])
    np.testing.assert_array_equal(load_sft_demonstrations(config, SPEC)["actions"], demos.actions)


def test_rlpd_transitions_from_the_dataset(dataset):
    demos, out = dataset
    transitions = load_demo_transitions(_config("rlpd", out, "policy.name=mlp_sac"), SPEC)
    rows = np.array([0, 1, 2, 3, 5, 6, 8, 9, 10])  # every step whose next observation is recorded
    np.testing.assert_array_equal(transitions["obs"], demos.obs[rows])
    np.testing.assert_array_equal(transitions["next_obs"], demos.obs[rows + 1])
    np.testing.assert_array_equal(transitions["rewards"], demos.rewards[rows])
    np.testing.assert_array_equal(transitions["actions"], demos.actions[rows])


def test_a_dataset_of_another_action_space_is_refused_in_one_line(dataset):
    _, out = dataset
    with pytest.raises(ConfigError) as error:
        load_sft_demonstrations(_config("sft", out), dict(SPEC, action_dim=8))
    assert str(error.value) == (f"algorithm.demos={out}: feature 'action' is [2] in the dataset; task "
                                "'maniskill_pushcube' takes [8]")


def test_the_task_spaces_come_from_its_env_and_a_misfit_is_refused_before_the_run(dataset, tmp_path):
    import sim_envs
    from embodied_rl.runners.demonstrations import check_demonstrations, env_spaces
    from embodied_rl.runners.setup import env_options

    _, misfit = dataset
    fitting = tmp_path / "fitting"
    write_lerobot_dataset(tiny_demos(state_dim=35, action_dim=8, cameras=0), fitting, 20, "push the cube")
    config = _config("sft", misfit)
    assert task_spaces(config, dict(obs_dim=25, action_dim=8, obs_shapes={"rgb": [64, 64, 3], "state": [25]})) \
        == TaskSpaces("maniskill_pushcube", 8, 25, (64, 64, 3))
    env = sim_envs.make("maniskill_pushcube", 1, processes=False, **env_options(config))
    try:
        assert env_spaces("maniskill_pushcube", env) == TaskSpaces("maniskill_pushcube", 8, 35)
        with pytest.raises(ConfigError) as error:
            check_demonstrations(config, env)
        assert str(error.value) == (f"algorithm.demos={misfit}: feature 'action' is [2] in the dataset; task "
                                    "'maniskill_pushcube' takes [8]")
        check_demonstrations(_config("sft", fitting), env)
    finally:
        env.close()
