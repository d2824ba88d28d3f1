"""Benches of the reasoning path (a causal LM on a text task), each measured in one run:

* ``embodied-rl bench generation``: tokens/s of every available generation engine on the same model and prompts
  (Hugging Face generate at full precision and with the int8 rollout copy; vLLM where it imports), alternating.
* ``embodied-rl bench text-async``: synchronous vs async rollout (``rollout.max_staleness=1``) on the same workers and
  threads: seconds per RL iteration, as a ratio.
* ``embodied-rl bench text-tis``: held-out accuracy curves of RL under int8 rollout without and with truncated
  importance sampling (and at full precision for reference), all from one SFT warm start.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from embodied_rl.bench import print_report, require_at_least_one
from embodied_rl.config import ConfigError
from embodied_rl.runtime import Cluster

TEXT_TASK = "math_arith"


def _prompts(tokenizer, count: int) -> list[list[int]]:
    import sim_envs
    from embodied_rl.models.causal_lm.chat import prompt_ids

    env = sim_envs.make(TEXT_TASK, 1, split="heldout", heldout_count=count)
    return [prompt_ids(tokenizer, p.question) for p in env.problems[:count]]


def _engines(model_name: str) -> tuple[dict, object]:
    """``({engine name: engine}, tokenizer)`` on one model: HF at full precision and on the int8 copy."""
    from embodied_rl.engines.hf_generation import HFGenerationEngine
    from embodied_rl.engines.quantization import quantized_copy
    from embodied_rl.models.causal_lm.chat import build_lm

    model, tokenizer = build_lm(model_name)
    ids = tokenizer.pad_token_id, tokenizer.eos_token_id
    engines = {"hf_fp32": HFGenerationEngine(model, *ids),
               "hf_int8": HFGenerationEngine(quantized_copy(model, "int8"), *ids)}
    return engines, tokenizer


def run_generation_bench(model_name: str, num_prompts: int, new_tokens: int, repeats: int, threads: int,
                         as_json: bool) -> int:
    import torch

    from embodied_rl.engines.generation import SamplingParams

    require_at_least_one(prompts=num_prompts, new_tokens=new_tokens, repeats=repeats, threads=threads)
    torch.set_num_threads(threads)
    engines, tokenizer = _engines(model_name)
    prompts = _prompts(tokenizer, num_prompts)
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)
    best: dict[str, float] = {}
    for name, engine in engines.items():  # warm-up
        engine.generate(prompts[:8], params)
    for _ in range(repeats):
        for name, engine in engines.items():
            start = time.perf_counter()
            tokens = sum(len(g.token_ids) for g in engine.generate(prompts, params))
            best[name] = max(best.get(name, 0.0), tokens / (time.perf_counter() - start))
    result = {"model": model_name, "prompts": len(prompts), "max_new_tokens": new_tokens, "torch_threads": threads,
              "repeats": repeats, **{f"{name}_tokens_per_s": round(v, 1) for name, v in best.items()}}
    result["ratio_int8_over_fp32"] = round(best["hf_int8"] / best["hf_fp32"], 3)
    result["not_available"] = _unavailable_engines()
    print_report(result, as_json)
    return 0


def _unavailable_engines() -> str:
    missing = []
    for package in ("vllm", "sglang"):
        try:
            __import__(package)
        except Exception:  # ImportError, or a build for another torch
            missing.append(package)
    return ", ".join(missing) or "none"


def _train(run_dir: Path, overrides: list[str], task: str = TEXT_TASK) -> list[dict]:
    """One reasoning run of ``task`` in ``run_dir``; its metrics rows."""
    from embodied_rl.config.reasoning import load_reasoning_config
    from embodied_rl.runners.reasoning import ReasoningRunner

    config = load_reasoning_config(task, None, [f"run_dir={run_dir}", *overrides])
    ReasoningRunner(config, run_dir).run()
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _warm_start(root: Path, sft_steps: int, overrides: list[str]) -> list[str]:
    """SFT once (no RL); the overrides that make every measured run start from its saved model (from the
    configured model untrained at ``sft_steps=0``)."""
    if not sft_steps:
        return ["sft.steps=0"]
    _train(root / "sft", [f"sft.steps={sft_steps}", "rl.iterations=0", *overrides])
    return [f"model.name={root / 'sft' / 'model'}", "sft.steps=0"]


def seconds_per_iteration(rows: list[dict], skip: int) -> float:
    """Mean ``time/iteration_s`` over RL iterations after the first ``skip`` (warm-up; an async run's first
    iteration cannot overlap)."""
    steps = [r["time/iteration_s"] for r in rows if "time/iteration_s" in r][skip:]
    if not steps:
        raise ConfigError(f"no RL iterations after the first {skip}: raise --iterations")
    return sum(steps) / len(steps)


# The batch both text benches run by default (overridable): 16 prompts x the recipe's group at lr 2e-4, the
# setting their figures in the README were measured with; the recipe itself trains on 64 prompts per iteration.
BENCH_BATCH = ["rl.prompts_per_iteration=16", "rl.lr=2e-4"]


def _batch_label(c) -> str:
    """What one RL update of the reasoning config ``c`` trains on, in words."""
    return f"{c.rl.prompts_per_iteration} prompts x {c.algorithm.group_size} responses, lr {c.rl.lr:g}"


def run_text_async_bench(iterations: int, sft_steps: int, as_json: bool, overrides: list[str]) -> int:
    require_at_least_one(iterations=iterations)
    skip = min(2, iterations - 1)
    common = ["torch_threads=1", "eval.every_iterations=0", "eval.num_problems=100", *BENCH_BATCH, *overrides]
    from embodied_rl.config.reasoning import load_reasoning_config

    c = load_reasoning_config(TEXT_TASK, None, common)  # what both runs use, named as it is
    result: dict = {"task": TEXT_TASK, "iterations": iterations, "batch": _batch_label(c),
                    "skipped_warmup_iterations": skip,
                    "workers": f"{c.rollout.num_workers} generation worker(s) + {c.actor.world_size} trainer "
                               f"rank(s), {c.torch_threads} torch thread(s) each"}
    with tempfile.TemporaryDirectory(prefix="bench-text-async-") as root, Cluster(None, None):  # one Ray for all
        start = _warm_start(Path(root), sft_steps, common)
        for mode, staleness in (("synchronous", 0), ("async", 1)):
            rows = _train(Path(root) / mode, [*start, f"rl.iterations={iterations}", f"rollout.max_staleness={staleness}",
                                              *common])
            trained = [r for r in rows if "time/iteration_s" in r]
            result[mode] = {"seconds_per_iteration": round(seconds_per_iteration(rows, skip), 4),
                            "generate_s": round(sum(r["time/generate_s"] for r in trained) / len(trained), 4),
                            "update_s": round(sum(r["time/update_s"] for r in trained) / len(trained), 4),
                            "policy_staleness": max(r["train/policy_staleness"] for r in trained),
                            "final_heldout_accuracy": rows[-1].get("eval/heldout_accuracy")}
    result["ratio_async_over_synchronous_step_time"] = round(
        result["async"]["seconds_per_iteration"] / result["synchronous"]["seconds_per_iteration"], 3)
    print_report(result, as_json)
    return 0


TIS_MODES = {"fp32": ["rollout.quantization=none"],
             "int8_no_tis": ["rollout.quantization=int8", "algorithm.tis_cap=null"],
             "int8_tis": ["rollout.quantization=int8", "algorithm.tis_cap=2.0"]}


def accuracy_curve(rows: list[dict]) -> list[list[float]]:
    """``[iteration, held-out accuracy]`` of the run's first evaluation (iteration 0) and every one after."""
    start = [[0, r["eval/start/heldout_accuracy"]] for r in rows if "eval/start/heldout_accuracy" in r]
    return start + [[r["train/iteration"], r["eval/heldout_accuracy"]] for r in rows if "eval/heldout_accuracy" in r]


def run_text_tis_bench(iterations: int, sft_steps: int, eval_every: int, as_json: bool, overrides: list[str]) -> int:
    require_at_least_one(iterations=iterations, eval_every=eval_every)
    common = [f"eval.every_iterations={eval_every}", "eval.num_problems=300", *BENCH_BATCH, *overrides]
    from embodied_rl.config.reasoning import load_reasoning_config

    result: dict = {"task": TEXT_TASK, "iterations": iterations,
                    "batch": _batch_label(load_reasoning_config(TEXT_TASK, None, common))}
    with tempfile.TemporaryDirectory(prefix="bench-text-tis-") as root, Cluster(None, None):
        start = _warm_start(Path(root), sft_steps, common)
        for mode, settings in TIS_MODES.items():
            rows = _train(Path(root) / mode, [*start, f"rl.iterations={iterations}", *settings, *common])
            curve = accuracy_curve(rows)
            diffs = [r["train/rollout_trainer_logp_diff"] for r in rows if "train/rollout_trainer_logp_diff" in r]
            result[mode] = {"accuracy_curve": curve, "start": curve[0][1], "final": curve[-1][1],
                            "best": max(a for _, a in curve),
                            "mean_abs_logp_diff_rollout_vs_trainer": round(sum(diffs) / max(len(diffs), 1), 5)}
    print_report(result, as_json)
    return 0
