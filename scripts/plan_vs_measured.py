"""Planned against measured peak memory of a reasoning run's trainer rank and generation worker on this CPU, for the
tiny and small LMs with and without the memory features: ``python scripts/plan_vs_measured.py``."""

import torch

from embodied_rl.commands.plan_text import text_plan
from embodied_rl.commands.plan_text_measure import measured_generation_peak, measured_trainer_peak
from embodied_rl.config.reasoning import load_reasoning_config

PROMPT_TOKENS = 96
BASE = ["rl.prompts_per_iteration=4", "algorithm.group_size=8", "rollout.max_new_tokens=64", "rl.num_minibatches=2"]
VARIANTS = [[], ["actor.activation_checkpointing=true"], ["actor.micro_batch_size=4"],
            ["algorithm.kl_coef=0.01", "actor.micro_batch_size=8", "actor.activation_checkpointing=true"],
            ["actor.lora_rank=8", "algorithm.kl_coef=0.01"]]

if __name__ == "__main__":
    torch.set_num_threads(1)
    print(f"{'model':6s} {'settings':70s} {'trainer MiB plan/measured':>27s} {'generation MiB plan/measured':>30s}")
    for size in ("tiny", "small"):
        for variant in VARIANTS:
            config = load_reasoning_config("math_arith", None, [f"model.name={size}", *BASE, *variant])
            parts = text_plan(config, PROMPT_TOKENS)["components"]
            trainer, generation = (sum(parts[k].values()) / 2 ** 20 for k in ("trainer rank", "generation"))
            mt = measured_trainer_peak(config, PROMPT_TOKENS) / 2 ** 20
            mg = measured_generation_peak(config, PROMPT_TOKENS) / 2 ** 20
            print(f"{size:6s} {' '.join(variant) or '(none)':70s} {trainer:8.2f}/{mt:7.2f} ({trainer / mt:.2f})"
                  f" {generation:10.2f}/{mg:7.2f} ({generation / mg:.2f})", flush=True)
