"""The reasoning recipes for instruct checkpoints load over a JSONL problem set and a checkpoint in a published
layout, their settings are the ones they state, and each plans to fit the GPUs it names for every model shape it is
sized for (Qwen2.5-0.5B/1.5B-Instruct, Llama-3.2-1B-Instruct: ``shapes/``'s config.json files)."""

import json

import pytest

from embodied_rl.config.reasoning import load_reasoning_config, rl_learning_rate
from embodied_rl.models.causal_lm.tiny_checkpoints import write_tiny_checkpoint

RECIPES = "configs/recipes/reasoning"
SHAPES = ["qwen2.5-0.5b-instruct", "qwen2.5-1.5b-instruct", "llama-3.2-1b-instruct"]


def test_the_gsm8k_recipe_loads_over_a_checkpoint_and_a_problem_set(tmp_path):
    problems = tmp_path / "train.jsonl"
    problems.write_text("\n".join(json.dumps({"question": f"What is {a} + 2?", "answer": f"{a} + 2 = {a + 2}\n#### "
                                                                                          f"{a + 2}"})
                                  for a in range(40)) + "\n")
    checkpoint = write_tiny_checkpoint(tmp_path / "qwen2", "qwen2")
    config = load_reasoning_config("math_jsonl", f"{RECIPES}/gsm8k_1gpu.yaml",
                                   [f"model.name={checkpoint}", f"env.path={problems}"])
    assert config.sft.steps == 0 and config.algorithm.name == "grpo" and config.algorithm.kl_coef == 0.001
    assert config.model.prompt_template.startswith("{question} Let's think step by step")
    assert rl_learning_rate(config.rl, 1) == 1e-7 and rl_learning_rate(config.rl, 10) == 1e-6
    assert config.env["answer_field"] == "answer" and config.eval.samples_per_problem == 4
    assert config.actor.micro_batch_size == 8 and config.actor.activation_checkpointing
    assert config.placement.components == {"env,rollout,actor": "0"}
    math = load_reasoning_config("math_jsonl", f"{RECIPES}/math_8gpu.yaml",
                                 [f"model.name={checkpoint}", f"env.path={problems}"], gpus_planned=8)
    assert math.env["prompt_field"] == "problem" and "\\boxed{}" in math.model.prompt_template
    assert math.actor.backend == "fsdp" and math.actor.world_size == 4 and math.rollout.num_workers == 4


@pytest.mark.parametrize("recipe, gpus", [("gsm8k_1gpu", 1), ("math_1gpu", 1), ("gsm8k_8gpu", 8), ("math_8gpu", 8)])
def test_each_recipe_plans_to_fit_its_gpus_for_every_shape(recipe, gpus, capsys):
    from embodied_rl.cli import main

    for shape in SHAPES:
        args = ["plan", "--task", "math_jsonl", "--config", f"{RECIPES}/{recipe}.yaml", "--gpus", str(gpus),
                "--gpu-memory", "80GB", "--json", f"model.name={RECIPES}/shapes/{shape}", "env.path=unused.jsonl"]
        assert main(args) == 0
        plan = json.loads(capsys.readouterr().out)
        own = plan["placements"]["this run's placement"]
        assert own["gpus"] == gpus and own["fits"], (shape, own)
        assert plan["parameters"] > 4e8
    # the 1-GPU recipe does not fit without its memory features (the planner counts them)
    args = ["plan", "--task", "math_jsonl", "--config", f"{RECIPES}/{recipe}.yaml", "--gpus", str(gpus), "--json",
            f"model.name={RECIPES}/shapes/qwen2.5-1.5b-instruct", "env.path=unused.jsonl",
            "actor.micro_batch_size=null", "actor.activation_checkpointing=false"]
    assert main(args) == 0
    assert not json.loads(capsys.readouterr().out)["placements"]["this run's placement"]["fits"]
