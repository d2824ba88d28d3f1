"""``embodied-rl plan --task math_arith ...``: the memory of a reasoning run's trainer ranks and generation workers.

Trainer rank: float32 master weights, gradients and AdamW's two moments (each divided by ``actor.world_size``
under FSDP), the KL reference (a frozen float32 copy) when ``algorithm.kl_coef`` > 0, and the activations of one
minibatch slice (``models/memory.py``'s decoder stack over prompt + response tokens, plus one chunk of float32
logits: ``models/causal_lm/logprobs.py``). Generation worker (Hugging Face engine): the weights in the checkpoint's
dtype, the KV cache of its sequences and the float32 scores ``generate`` keeps for every new token.
"""

from __future__ import annotations

import json
import math

import torch

from embodied_rl.commands.plan import placements, print_placements
from embodied_rl.models.memory import GIB, Stack

PROMPT_TOKENS = 256
"""Prompt length assumed for every sequence (the chat template and question; ``--prompt-tokens``), printed."""


def _meta_lm(name: str):
    """``(model on the meta device, its checkpoint dtype)``: ``tiny`` / ``small`` built in code, else a local
    checkpoint's ``config.json`` (no weights read)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from embodied_rl.models.causal_lm.loading import TINY_SIZES, build_tiny_causal_lm

    with torch.device("meta"):
        if name in TINY_SIZES:
            return build_tiny_causal_lm(name)[0], torch.float32
        config = AutoConfig.from_pretrained(name, local_files_only=True)
        dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        return AutoModelForCausalLM.from_config(config), dtype


def text_plan(config, prompt_tokens: int = PROMPT_TOKENS) -> dict:
    from embodied_rl.models.causal_lm.logprobs import CHUNK_TOKENS

    model, dtype = _meta_lm(config.model.name)
    lm = model.config
    count = sum(p.numel() for p in model.parameters())
    e = torch.empty((), dtype=dtype).element_size()
    ranks = config.actor.world_size
    shard = ranks if config.actor.backend == "fsdp" else 1
    sequences = config.rl.prompts_per_iteration * config.algorithm.group_size
    rows = math.ceil(sequences / config.rl.num_minibatches / (ranks if config.actor.backend != "megatron" else 1))
    tokens = prompt_tokens + config.rollout.max_new_tokens
    head_dim = getattr(lm, "head_dim", None) or lm.hidden_size // lm.num_attention_heads
    kv_width = head_dim * getattr(lm, "num_key_value_heads", lm.num_attention_heads)
    stack = Stack("lm", "decoder", lm.num_hidden_layers, tokens, lm.hidden_size, lm.intermediate_size,
                  lm.num_attention_heads, kv_width, True, getattr(lm, "_attn_implementation", None) or "sdpa")
    logits = 2 * min(CHUNK_TOKENS, rows * config.rollout.max_new_tokens) * lm.vocab_size * 4
    trainer = {"weights": 4 * count / shard, "gradients": 4 * count / shard, "optimizer": 8 * count / shard,
               "reference": 4 * count / shard if config.algorithm.kl_coef > 0 else 0,
               "activations": stack.activation_bytes(rows, e) + logits}
    batch = math.ceil(sequences / config.rollout.num_workers)
    kv_cache = 2 * lm.num_hidden_layers * kv_width * e * tokens * batch
    scores = batch * lm.vocab_size * 4 * config.rollout.max_new_tokens if config.rollout.engine == "hf" else 0
    generation = {"weights": e * count, "kv_cache": kv_cache, "scores": scores}
    return {"model": config.model.name, "dtype": str(dtype).removeprefix("torch."), "parameters": count,
            "prompt_tokens": prompt_tokens, "trainer_ranks": ranks, "generation_workers": config.rollout.num_workers,
            "minibatch_rows_per_rank": rows, "components": {"trainer rank": trainer, "generation": generation}}


def run_text_plan(task: str, config_file: str | None, overrides: list[str], gpus: int, gpu_gib: float,
                  as_json: bool, prompt_tokens: int = PROMPT_TOKENS) -> int:
    from embodied_rl.config.reasoning import load_reasoning_config

    config = load_reasoning_config(task, config_file, overrides)
    plan = text_plan(config, prompt_tokens)
    trainer, generation = (sum(plan["components"][k].values()) / GIB for k in ("trainer rank", "generation"))
    ranks, workers = plan["trainer_ranks"], plan["generation_workers"]
    plan["placements"] = placements(trainer, generation, max(ranks, workers), ranks + workers, gpus, gpu_gib)
    plan.update(gpus=gpus, gpu_memory_gib=gpu_gib)
    if as_json:
        print(json.dumps(plan))
        return 0
    print(f"plan: {task}, model {plan['model']} ({plan['dtype']}): {plan['parameters'] / 1e9:.3f}B parameters; "
          f"{plan['minibatch_rows_per_rank']} rows of {plan['prompt_tokens']} (assumed) + "
          f"{config.rollout.max_new_tokens} tokens per trainer rank and minibatch")
    for name, parts in plan["components"].items():
        cells = ", ".join(f"{k} {v / GIB:.2f}" for k, v in parts.items())
        print(f"{name}: {sum(parts.values()) / GIB:.2f} GiB ({cells})")
    print_placements(plan["placements"], gpu_gib)
    return 0
