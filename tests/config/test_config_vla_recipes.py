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


def _size(recipe: Path) -> str:
    """The policy size a recipe's name says: ``<task>_<policy>_<size>[_<variant>]``."""
    return next(size for size in ("tiny", "full") if f"_{size}" in recipe.stem)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_stage_of_a_vla_recipe_validates(recipe):
    task = "maniskill_" + recipe.stem.split("_")[0]
    _, stages = load_stages(task, str(recipe), [])
    assert [s.name for s in stages] in (["0-sft", "1-grpo"], ["0-sft", "1-ppo"])
    for stage in stages:
        validate(stage.config)
        assert stage.config.env.obs_mode == "rgb"
        assert stage.config.policy.size == _size(recipe)
        assert stage.config.policy.name in recipe.stem
    assert "not yet measured" in recipe.read_text().lower() or "docs/results.md" in recipe.read_text()


def test_the_rlinf_form_recipes_say_what_they_claim():
    _, stages = load_stages("maniskill_pushcube", str(next(p for p in RECIPES if p.stem == "pushcube_pi0_tiny_rlinf")),
                            [])
    sft, rl = (s.config for s in stages)
    assert not sft.policy.options.get("train_expert_only") and rl.policy.options["train_expert_only"] is True
    assert {k: v for k, v in sft.policy.options.items()} == {k: v for k, v in rl.policy.options.items()
                                                              if k != "train_expert_only"}
    a = rl.algorithm
    assert (a.name, a.ratio_level, a.score, a.dynamic_sampling) == ("grpo", "decision", "success", True)
    envs = rl.env.num_workers * rl.env.envs_per_worker
    assert a.groups_per_update >= 16 and a.max_sampling_rounds * envs // a.group_size >= a.groups_per_update

    _, stages = load_stages("maniskill_pushcube",
                            str(next(p for p in RECIPES if p.stem == "pushcube_openvla_oft_tiny_ppo")), [])
    sft, rl = (s.config for s in stages)
    assert sft.policy.options["action_head"] == rl.policy.options["action_head"] == "l1_regression"
    assert sft.policy.init_log_std == rl.policy.init_log_std < -0.5  # narrower than the default Gaussian
    a = rl.algorithm
    assert (a.name, a.gamma, a.gae_lambda) == ("ppo", 0.99, 0.95)
    assert a.lr * a.critic_lr_scale == pytest.approx(3e-3)  # RLinf's value_lr
    assert rl.env.reward_mode == "rlinf"

    _, stages = load_stages("maniskill_pushcube",
                            str(next(p for p in RECIPES if p.stem == "pushcube_openvla_oft_tiny_rlinf")), [])
    sft, rl = (s.config for s in stages)
    assert "action_head" not in sft.policy.options and "action_head" not in rl.policy.options  # action tokens
    assert "temperature" not in sft.policy.options and rl.policy.options["temperature"] == 0.5
    assert sft.algorithm.gradient_steps == 6000
    a = rl.algorithm
    assert (a.name, a.ratio_level, a.score, a.dynamic_sampling) == ("grpo", "token", "success", True)
    envs = rl.env.num_workers * rl.env.envs_per_worker
    assert a.groups_per_update >= 16 and a.max_sampling_rounds * envs // a.group_size >= a.groups_per_update


@pytest.mark.parametrize("recipe", [p for p in RECIPES if _size(p) == "tiny"], ids=lambda p: p.stem)
def test_tiny_vla_recipes_train_and_evaluate_at_maniskills_own_time_limit_on_success(recipe):
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401  (registers the ManiSkill ids)

    task = "maniskill_" + recipe.stem.split("_")[0]
    _, stages = load_stages(task, str(recipe), [])
    limit = gym.spec({"pushcube": "PushCube-v1", "pickcube": "PickCube-v1"}[recipe.stem.split("_")[0]]).max_episode_steps
    for stage in stages:
        assert stage.config.env.max_episode_steps == limit and stage.config.eval.max_episode_steps in (None, limit)
    assert stages[0].config.eval.sampled  # the policy RL starts from is evaluated as RL samples it
    rl_eval = stages[1].config.eval
    # the policy RL trains is evaluated sampled too, in the stage or by the held-out command the recipe gives
    assert rl_eval.sampled or "eval.sampled=true" in recipe.read_text()
    rl = stages[1].config.algorithm
    if recipe.stem.endswith("_tiny"):  # the tiny recipes as measured (docs/results.md); the RLinf forms differ
        assert (rl.score, rl.ratio_level) == ("success", "token") and rl.group_size >= 8


def test_switching_the_rl_stage_to_ppo_keeps_the_shared_keys():
    recipe = next(p for p in RECIPES if p.stem == "pushcube_pi0_tiny")
    _, stages = load_stages("maniskill_pushcube", str(recipe), ["stages.1.algorithm.name=ppo"])
    assert stages[1].config.algorithm.name == "ppo" and stages[1].config.algorithm.lr == pytest.approx(3e-5)
    assert not hasattr(stages[1].config.algorithm, "score")  # the recipe's GRPO-only key is dropped
