import pytest

import sim_envs
from sim_envs.registry import register_task


def test_builtin_tasks_are_registered():
    tasks = sim_envs.list_tasks()
    for name in ("maniskill_pickcube", "maniskill_pushcube", "maniskill_stackcube"):
        assert name in tasks
    assert tasks == sorted(tasks)


def test_unknown_task_names_the_available_ones():
    with pytest.raises(sim_envs.TaskConfigError, match="unknown task 'nope'.*maniskill_pushcube"):
        sim_envs.make("nope", 1)


def test_unknown_env_option_is_rejected():
    with pytest.raises(sim_envs.TaskConfigError, match="unknown env option 'colour'"):
        sim_envs.make("maniskill_pushcube", 1, colour="red")


def test_bad_obs_mode_is_rejected():
    with pytest.raises(sim_envs.TaskConfigError, match="obs_mode='depth'.*state, rgb"):
        sim_envs.make("maniskill_pushcube", 1, obs_mode="depth")


def test_task_with_missing_assets_fails_with_one_line_not_a_prompt():
    with pytest.raises(sim_envs.TaskConfigError) as error:
        sim_envs.make("maniskill_picksingleycb", 1)
    assert "needs assets that are not installed" in str(error.value)
    assert "\n" not in str(error.value)


def test_registering_a_task_is_one_decorated_function():
    @register_task("test_tiny_pushcube", "PushCube with 5-step episodes", "maniskill", "PushCube-v1")
    def tiny(num_envs, **overrides):
        return sim_envs.make("maniskill_pushcube", num_envs, max_episode_steps=5, **overrides)

    assert "test_tiny_pushcube" in sim_envs.list_tasks()
    env = sim_envs.make("test_tiny_pushcube", 1, processes=False)
    assert env.max_episode_steps == 5
    env.close()
    with pytest.raises(ValueError, match="already registered"):
        register_task("test_tiny_pushcube")(tiny)
