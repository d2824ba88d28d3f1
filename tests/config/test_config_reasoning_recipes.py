"""The pretrained-checkpoint reasoning recipe loads over a GSM8K-style JSONL set and a checkpoint in a published
layout, and its settings are the ones it states."""

import json

from embodied_rl.config.reasoning import load_reasoning_config, rl_learning_rate
from embodied_rl.models.causal_lm.tiny_checkpoints import write_tiny_checkpoint

RECIPE = "configs/recipes/reasoning/gsm8k_pretrained.yaml"


def test_the_gsm8k_recipe_loads_over_a_checkpoint_and_a_problem_set(tmp_path):
    problems = tmp_path / "train.jsonl"
    problems.write_text("\n".join(json.dumps({"question": f"What is {a} + 2?", "answer": f"{a} + 2 = {a + 2}\n#### "
                                                                                          f"{a + 2}"})
                                  for a in range(40)) + "\n")
    checkpoint = write_tiny_checkpoint(tmp_path / "qwen2", "qwen2")
    config = load_reasoning_config("math_jsonl", RECIPE, [f"model.name={checkpoint}", f"env.path={problems}"])
    assert config.sft.steps == 0 and config.algorithm.name == "grpo" and config.algorithm.kl_coef == 0.001
    assert config.model.prompt_template.startswith("{question} Let's think step by step")
    assert rl_learning_rate(config.rl, 1) == 1e-7 and rl_learning_rate(config.rl, 10) == 1e-6
    assert config.env["answer_field"] == "answer" and config.eval.samples_per_problem == 4
