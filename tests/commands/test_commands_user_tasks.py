"""A task registered by the user (not in sim_envs) through the preflight check and the eval command."""

import threading

import pytest

import sim_envs
from embodied_rl.commands.evaluate import evaluate_checkpoint
from embodied_rl.commands.preflight import check_task_starts
from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.config.loader import to_yaml
from embodied_rl.utils.checkpoint import save_checkpoint
from sim_envs import register_task


def test_preflight_builds_a_user_task_from_the_entry_the_env_workers_receive():
    built = []

    @register_task("test_preflight_user_task", "PushCube with 5-step episodes")
    def user_task(num_envs, **overrides):
        built.append(num_envs)  # the closure pickles by value: this list is a copy in the check's env
        overrides["max_episode_steps"] = 5
        return sim_envs.make("maniskill_pushcube", num_envs, **overrides)

    check_task_starts(load_train_config("test_preflight_user_task"))
    assert built == []  # the env was built from the unpickled entry, as an env worker builds it


def test_preflight_names_a_task_whose_factory_cannot_reach_the_env_workers():
    lock = threading.Lock()

    @register_task("test_preflight_unpicklable_task", "a factory closing over a lock")
    def unpicklable(num_envs, **overrides):
        with lock:
            return sim_envs.make("maniskill_pushcube", num_envs, **overrides)

    with pytest.raises(ConfigError, match="'test_preflight_unpicklable_task' cannot be sent to the env workers") \
            as error:
        check_task_starts(load_train_config("test_preflight_unpicklable_task"))
    assert "\n" not in str(error.value)


def test_eval_of_a_task_not_registered_in_this_process_says_so(tmp_path):
    config = load_train_config("maniskill_pushcube")
    config.task = "test_registered_elsewhere"
    save_checkpoint(tmp_path / "checkpoints", 1, {}, b"", {"iteration": 1}, to_yaml(config), keep_last=1)
    with pytest.raises(ConfigError, match="task 'test_registered_elsewhere', which is not registered here") as error:
        evaluate_checkpoint(tmp_path, episodes=1)
    assert "\n" not in str(error.value)
