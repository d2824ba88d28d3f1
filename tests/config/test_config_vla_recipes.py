"""The VLA recipes (configs/recipes/vla/): every stage loads and validates, and says what it claims."""

from pathlib import Path

import pytest

from embodied_rl.config.schema import validate
from embodied_rl.config.stages import load_stages

RECIPES = sorted((Path(__file__).resolve().parents[2] / "embodied_rl" / "configs" / "recipes" / "vla").glob("*.yaml"))


def test_there_is_a_tiny_recipe_per_task_and_vla_family():
    names = {p.stem for p in RECIPES}
    for task in ("pushcube", "pickcube"):
        for policy in ("openvla_oft", "pi0"):
            assert f"{task}_{policy}_tiny" in names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_stage_of_a_vla_recipe_validates(recipe):
    task = "maniskill_" + recipe.stem.split("_")[0]
    _, stages = load_stages(task, str(recipe), [])
    assert [s.name for s in stages] == ["0-sft", "1-grpo"]
    for stage in stages:
        validate(stage.config)
        assert stage.config.env.obs_mode == "rgb"
        assert stage.config.policy.size == recipe.stem.rsplit("_", 1)[1]
        assert stage.config.policy.name in recipe.stem


@pytest.mark.parametrize("recipe", [p for p in RECIPES if p.stem.endswith("_tiny")], ids=lambda p: p.stem)
def test_tiny_vla_recipes_train_and_evaluate_at_maniskills_own_time_limit_on_success(recipe):
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401  (registers the ManiSkill ids)

    task = "maniskill_" + recipe.stem.split("_")[0]
    _, stages = load_stages(task, str(recipe), [])
    limit = gym.spec({"pushcube": "PushCube-v1", "pickcube": "PickCube-v1"}[recipe.stem.split("_")[0]]).max_episode_steps
    for stage in stages:
        assert stage.config.env.max_episode_steps == limit and stage.config.eval.max_episode_steps in (None, limit)
        assert stage.config.eval.sampled  # the policy RL trains is evaluated, beside the deterministic one
    rl = stages[1].config.algorithm
    assert (rl.score, rl.ratio_level) == ("success", "token") and rl.group_size >= 8


def test_switching_the_rl_stage_to_ppo_keeps_the_shared_keys():
    recipe = next(p for p in RECIPES if p.stem == "pushcube_pi0_tiny")
    _, stages = load_stages("maniskill_pushcube", str(recipe), ["stages.1.algorithm.name=ppo"])
    assert stages[1].config.algorithm.name == "ppo" and stages[1].config.algorithm.lr == pytest.approx(3e-5)
    assert not hasattr(stages[1].config.algorithm, "score")  # the recipe's GRPO-only key is dropped
