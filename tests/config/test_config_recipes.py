"""Recipes ship inside the package; every built-in task has one; a user's task starts from the schema defaults."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

import sim_envs
from embodied_rl.config import ConfigError, TrainConfig, load_train_config
from embodied_rl.config import loader
from sim_envs import register_task
from tests_helpers import REPO

MAIN_TASKS = ("maniskill_pushcube", "maniskill_pickcube", "maniskill_stackcube")


def _builtin_tasks() -> list[str]:
    return [name for name in sim_envs.list_tasks() if sim_envs.get_task(name).builtin]


def test_every_builtin_task_has_a_recipe_inside_the_package():
    assert set(MAIN_TASKS) <= set(_builtin_tasks())
    from embodied_rl.commands.train_reasoning import is_text_task
    from embodied_rl.config.reasoning import load_reasoning_config

    for name in _builtin_tasks():
        assert loader.recipe_path(name).is_file(), name
        (load_reasoning_config if is_text_task(name) else load_train_config)(name, None, [])  # the recipe is valid
    assert str(loader.CONFIGS_DIR).startswith(str(REPO / "embodied_rl"))
    assert (REPO / "configs" / "placement" / "hybrid_pipelined.yaml").is_file()  # the clone's link still works


def test_a_builtin_task_whose_recipe_is_missing_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setattr(loader, "CONFIGS_DIR", tmp_path)
    with pytest.raises(ConfigError, match="built-in task 'maniskill_pushcube' has no recipe"):
        load_train_config("maniskill_pushcube")


def test_a_user_task_starts_from_the_schema_defaults():
    @register_task("test_recipes_user_task", "a user's task")
    def user_task(num_envs, **overrides):
        return sim_envs.make("maniskill_pushcube", num_envs, **overrides)

    assert not sim_envs.get_task("test_recipes_user_task").builtin
    config = load_train_config("test_recipes_user_task", None, ["algorithm.lr=1e-4"])
    defaults = TrainConfig()
    assert config.task == "test_recipes_user_task"
    assert config.total_env_steps == defaults.total_env_steps
    assert config.env.num_workers == defaults.env.num_workers
    assert config.algorithm.lr == pytest.approx(1e-4)


@pytest.mark.slow
def test_recipes_ship_in_the_wheel_and_load_from_a_plain_install(tmp_path):
    source = tmp_path / "source"  # a copy: building in the clone would write build/ and egg-info there
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in ("embodied_rl", "sim_envs"):
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(tmp_path / "dist"),
                            str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("embodied_rl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in _builtin_tasks():
        assert f"embodied_rl/configs/{name}.yaml" in names
    assert "embodied_rl/configs/placement/hybrid_pipelined.yaml" in names

    target = tmp_path / "installed"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target),
                                str(wheel)], capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-2000:]
    probe = ("from embodied_rl.config import loader, load_train_config; "
             "print(loader.CONFIGS_DIR); print(load_train_config('maniskill_pushcube').total_env_steps)")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(target)))
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    configs_dir, total_env_steps = loaded.stdout.strip().splitlines()[-2:]
    assert configs_dir.startswith(str(target))  # the installed copy, not the clone
    assert int(total_env_steps) == 300000  # from the recipe, not the schema default (2,000,000)


@pytest.mark.parametrize("task, env_id", [("maniskill_pickcube", "PickCube-v1"), ("maniskill_pushcube", "PushCube-v1")])
def test_staged_main_recipes_train_and_evaluate_at_maniskills_own_time_limit(task, env_id):
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401  (registers the ManiSkill ids)

    from embodied_rl.config.stages import load_stages

    limit = gym.spec(env_id).max_episode_steps
    _, stages = load_stages(task, None, [])
    assert [s.config.algorithm.name for s in stages] == ["sft", "grpo"]
    for stage in stages:
        assert stage.config.env.max_episode_steps == limit == 50
        assert stage.config.eval.max_episode_steps in (None, limit)
        assert stage.config.eval.num_episodes == 256
