"""``embodied-rl plan --task math_jsonl ...``: the memory of a reasoning run's trainer ranks and generation workers.

Trainer rank, at the larger of its two phases:

* always held: float32 master weights (LoRA: the base in the checkpoint's dtype, adapters float32) and AdamW's two
  moments of the trained weights (each divided by ``actor.world_size`` under FSDP), and the KL reference when
  ``algorithm.kl_coef`` > 0 (``workers/lm_reference.py``: a copy in the checkpoint's dtype, none on the GPU with
  ``actor.reference_offload``, a float32 shard under FSDP, the adapters only under LoRA);
* the update pass: gradients, autocast's copies of the weights in the checkpoint's dtype (mixed precision) and the
  activations of one micro-batch (``actor.micro_batch_size`` rows, or the whole minibatch slice): the decoder stack
  (``models/memory.py``; with ``actor.activation_checkpointing`` each layer's input plus one layer's activations)
  over prompt + response tokens, the backward pass's working set in one layer, plus the output layer's chunk of
  float32 logits, its log-softmax and their gradient (``models/causal_lm/logprobs.py``);
* the old / reference log-prob passes (no gradients; gradients freed): one micro-batch's widest layer and logits
  chunk, and an offloaded reference brought onto the GPU.

Generation worker (Hugging Face engine): the weights in the checkpoint's dtype, the KV cache of its sequences, the
prefill's widest layer, and the sampler's working set: float32 ``[B, V]`` logits, their warped copy and the
log-softmax ``engines/hf_generation.py`` keeps for one step (no per-step scores).

The figures are checked against peaks measured on CPU (``torch.distributed._tools.mem_tracker.MemTracker``) for the
``tiny`` and ``small`` LMs (``tests/commands/test_commands_plan_text.py``, ``scripts/plan_vs_measured.py``).
"""

from __future__ import annotations

import json
import math

import torch

from embodied_rl.commands.plan import HEADROOM_GIB, placements, print_placements, sharded_weight_bytes
from embodied_rl.models.memory import GIB, Stack, inference_bytes

PROMPT_TOKENS = 256
"""Prompt length assumed for every sequence (the chat template and question; ``--prompt-tokens``), printed."""


def _meta_lm(name: str, lora_rank: int = 0):
    """``(model on the meta device, its checkpoint dtype)``: ``tiny`` / ``small`` built in code, else a local
    checkpoint's ``config.json`` (no weights read); with ``lora_rank`` its adapters injected as the trainer does."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from embodied_rl.models.causal_lm.loading import TINY_SIZES, build_tiny_causal_lm

    with torch.device("meta"):
        if name in TINY_SIZES:
            model, dtype = build_tiny_causal_lm(name)[0], torch.float32
        else:
            config = AutoConfig.from_pretrained(name, local_files_only=True)
            dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
            dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        if lora_rank:
            from embodied_rl.models.causal_lm.lora import add_lora

            add_lora(model, lora_rank)
    return model, dtype


def _decoder_stack(lm, tokens: int) -> Stack:
    head_dim = getattr(lm, "head_dim", None) or lm.hidden_size // lm.num_attention_heads
    kv_width = head_dim * getattr(lm, "num_key_value_heads", lm.num_attention_heads)
    return Stack("lm", "decoder", lm.num_hidden_layers, tokens, lm.hidden_size, lm.intermediate_size,
                 lm.num_attention_heads, kv_width, True, getattr(lm, "_attn_implementation", None) or "sdpa")


def micro_batch_rows(config, slice_rows: int, tokens: int) -> int:
    """Rows in the largest micro-batch the trainer cuts from a slice of ``slice_rows`` sequences of ``tokens``
    tokens each (``engines/training/micro_batches.py``, with the run's ``actor.*`` limits)."""
    from embodied_rl.engines.training.micro_batches import micro_batches

    passes = micro_batches(list(range(slice_rows)), [tokens] * slice_rows, config.actor.micro_batch_size,
                           config.actor.max_tokens_per_micro_batch)
    return max((len(part) for part in passes), default=1)


def trainer_plan(config, model, dtype: torch.dtype, prompt_tokens: int) -> tuple[dict, int]:
    """``(bytes by part of one trainer rank at its peak, rows per micro-batch)``."""
    from embodied_rl.models.causal_lm.logprobs import CHUNK_TOKENS

    lm, actor = model.config, config.actor
    e = torch.empty((), dtype=dtype).element_size()
    mixed = dtype != torch.float32
    count = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    lora = actor.lora_rank > 0
    ranks = actor.world_size
    megatron = actor.backend == "megatron"
    shard = ranks if actor.backend == "fsdp" else tensor_parallel_size(actor) if megatron else 1
    data_ranks = data_parallel_ranks(actor)
    sequences = config.rl.prompts_per_iteration * config.algorithm.group_size
    slice_rows = math.ceil(sequences / config.rl.num_minibatches / data_ranks)
    tokens = prompt_tokens + config.rollout.max_new_tokens
    rows = micro_batch_rows(config, slice_rows, tokens)
    if lora:
        weights = e * (count - trained) + 4 * trained
    elif actor.backend == "fsdp":  # its shard, plus what FSDP gathers whole while a layer runs (float32 masters)
        weights = sharded_weight_bytes(model, ranks) * 4 / e
    elif megatron:  # its TP slice: float32 masters, and the bf16 parameters the passes run on
        weights = (4 + (e if mixed else 0)) * count / shard
    else:
        weights = 4 * count
    reference = 0.0
    if config.algorithm.kl_coef > 0:
        if lora:
            reference = 4 * trained
        elif actor.backend == "fsdp":
            reference = 4 * count / shard
        elif megatron:  # a sliced copy in the checkpoint's dtype
            reference = e * count / shard
        elif not actor.reference_offload:
            reference = e * count
    stack = _decoder_stack(lm, tokens)
    response_tokens = rows * config.rollout.max_new_tokens
    chunk = min(CHUNK_TOKENS, response_tokens)
    # the chunk's float32 logits, log-softmax and gradient, and the gathered response hidden states [N, H]
    head = 3 * chunk * lm.vocab_size * 4 + 2 * response_tokens * lm.hidden_size * 4
    # the backward pass's working set in the layer it is in: the gradients of the MLP's intermediates (gate, up,
    # their product) and of the layer's float32 input and output
    backward = (3 * e * lm.intermediate_size + 2 * 4 * lm.hidden_size) * tokens * rows
    update = {"gradients": 4 * trained / shard,
              "autocast_copies": e * (trained if not lora else 0) / shard if mixed and not megatron else 0.0,
              "activations": stack.activation_bytes(rows, e, actor.activation_checkpointing) + head + backward}
    logprob_pass = {"activations": inference_bytes([stack], rows, e) + 2 * chunk * lm.vocab_size * 4,
                    "reference_onloaded": e * count if actor.reference_offload and config.algorithm.kl_coef > 0
                    and not lora else 0.0}
    held = {"weights": weights, "optimizer": 8 * trained / shard, "reference": reference}
    phase = update if sum(update.values()) >= sum(logprob_pass.values()) else logprob_pass
    parts = {**held, "gradients": 0.0, "autocast_copies": 0.0, "activations": 0.0, "reference_onloaded": 0.0}
    parts.update(phase)
    return parts, rows


def generation_plan(config, model, dtype: torch.dtype, prompt_tokens: int) -> dict:
    """Bytes by part of one generation worker at its peak (its share of every iteration's sequences at once)."""
    lm = model.config
    e = torch.empty((), dtype=dtype).element_size()
    count = sum(p.numel() for name, p in model.named_parameters() if "lora_" not in name)
    sequences = config.rl.prompts_per_iteration * config.algorithm.group_size
    batch = math.ceil(sequences / config.rollout.num_workers)
    tokens = prompt_tokens + config.rollout.max_new_tokens
    stack = _decoder_stack(lm, prompt_tokens)
    kv_cache = 2 * lm.num_hidden_layers * stack.kv_width * e * tokens * batch
    sampler = (3 * 4 + e) * batch * lm.vocab_size if config.rollout.engine == "hf" else 0
    return {"weights": e * count, "kv_cache": kv_cache, "prefill": inference_bytes([stack], batch, e),
            "sampler": sampler}


def tensor_parallel_size(actor) -> int:
    """Ranks one Megatron copy of the model is split over (1 for the other backends)."""
    if actor.backend != "megatron":
        return 1
    return actor.tensor_parallel_size or actor.world_size


def data_parallel_ranks(actor) -> int:
    """How many slices each minibatch is split into: the trainer ranks over the tensor-parallel size."""
    return actor.world_size // tensor_parallel_size(actor)


def text_plan(config, prompt_tokens: int = PROMPT_TOKENS) -> dict:
    model, dtype = _meta_lm(config.model.name, config.actor.lora_rank)
    trainer, rows = trainer_plan(config, model, dtype, prompt_tokens)
    generation = generation_plan(config, model, dtype, prompt_tokens)
    sequences = config.rl.prompts_per_iteration * config.algorithm.group_size
    data_ranks = data_parallel_ranks(config.actor)
    return {"model": config.model.name, "dtype": str(dtype).removeprefix("torch."),
            "parameters": sum(p.numel() for name, p in model.named_parameters() if "lora_" not in name),
            "prompt_tokens": prompt_tokens, "trainer_ranks": config.actor.world_size,
            "generation_workers": config.rollout.num_workers,
            "minibatch_rows_per_rank": math.ceil(sequences / config.rl.num_minibatches / data_ranks),
            "micro_batch_rows": rows, "components": {"trainer rank": trainer, "generation": generation}}


def recipe_placement(config, trainer_gib: float, generation_gib: float, gpus: int, gpu_gib: float) -> dict | None:
    """The run's own ``placement.components`` on ``gpus`` GPUs: the GPUs it names and the peak on the fullest one
    (where trainer ranks and generation workers share GPUs they take turns, the idle side offloaded, unless
    ``placement.offload=never`` or FSDP, which keeps its shards; each worker is spread over its component's GPUs
    one per GPU); None without ``placement.components``."""
    from embodied_rl.config.reasoning import text_placement

    placement, _ = text_placement(config, gpus)
    if placement is None:
        return None
    load: dict[int, dict[str, float]] = {}
    for component, count, gib in (("actor", config.actor.world_size, trainer_gib),
                                  ("rollout", config.rollout.num_workers, generation_gib)):
        slots = placement.slots[component]
        for worker in range(count):
            slot = load.setdefault(slots[worker % len(slots)], {"actor": 0.0, "rollout": 0.0})
            slot[component] += gib
    resident = config.placement.offload == "never" or config.actor.backend == "fsdp"
    peak = max((s["actor"] + s["rollout"] if resident else max(s["actor"], s["rollout"])) for s in load.values())
    used = sorted({slot for component in placement.slots.values() for slot in component})
    return {"peak_gib": peak, "gpus": len(used), "fits": peak <= gpu_gib - HEADROOM_GIB and len(used) <= gpus}


def run_text_plan(task: str, config_file: str | None, overrides: list[str], gpus: int, gpu_gib: float,
                  as_json: bool, prompt_tokens: int = PROMPT_TOKENS) -> int:
    from embodied_rl.config.reasoning import load_reasoning_config

    config = load_reasoning_config(task, config_file, overrides, gpus_planned=gpus)
    plan = text_plan(config, prompt_tokens)
    trainer, generation = (sum(plan["components"][k].values()) / GIB for k in ("trainer rank", "generation"))
    ranks, workers = plan["trainer_ranks"], plan["generation_workers"]
    plan["placements"] = placements(trainer, generation, max(ranks, workers), ranks + workers, gpus, gpu_gib,
                                    offloaded=config.actor.backend != "fsdp")
    own = recipe_placement(config, trainer, generation, gpus, gpu_gib)
    if own is not None:
        plan["placements"] = {"this run's placement": own, **plan["placements"]}
    plan.update(gpus=gpus, gpu_memory_gib=gpu_gib)
    if as_json:
        print(json.dumps(plan))
        return 0
    print(f"plan: {task}, model {plan['model']} ({plan['dtype']}): {plan['parameters'] / 1e9:.3f}B parameters; "
          f"{plan['minibatch_rows_per_rank']} rows of {plan['prompt_tokens']} (assumed) + "
          f"{config.rollout.max_new_tokens} tokens per trainer rank and minibatch, in micro-batches of "
          f"{plan['micro_batch_rows']}")
    for name, parts in plan["components"].items():
        cells = ", ".join(f"{k} {v / GIB:.2f}" for k, v in parts.items() if v)
        print(f"{name}: {sum(parts.values()) / GIB:.2f} GiB ({cells})")
    print_placements(plan["placements"], gpu_gib)
    return 0
