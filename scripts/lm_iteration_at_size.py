"""One whole GRPO iteration (generate the groups, old and reference log-probs, update, weight sync, checkpoint) of a
random Qwen2-architecture model at a published model's shape, through `embodied-rl train`, with the LM trainer's
memory features on or off; prints the run's wall time and its peak memory.

    python scripts/lm_iteration_at_size.py --shape qwen2.5-1.5b-instruct --features on  [--lora 16]

The checkpoint (a BPE tokenizer trained here, weights saved by save_pretrained in bf16) and a GSM8K-format JSONL set
are written under --workdir once. Memory is sampled every 0.5 s (psutil): the process tree's proportional set
size, and the machine's used memory above what it was at the start."""

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

SHAPES = Path(__file__).resolve().parents[1] / "embodied_rl/configs/recipes/reasoning/shapes"
KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
        "vocab_size", "tie_word_embeddings", "max_position_embeddings")


def checkpoint(shape: str, workdir: Path) -> Path:
    from embodied_rl.models.causal_lm.tiny_checkpoints import write_tiny_checkpoint

    directory = workdir / shape
    if not (directory / "config.json").is_file():
        published = json.loads((SHAPES / shape / "config.json").read_text())
        size = {k: published[k] for k in KEYS}
        size["max_position_embeddings"] = 4096
        write_tiny_checkpoint(directory, "qwen2", size=size)
    return directory


def problems(workdir: Path) -> Path:
    path = workdir / "gsm8k_format.jsonl"
    rows = [{"question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
             "answer": f"He has {a} + {b} = {a + b} apples.\n#### {a + b}"} for a in range(1, 40) for b in (2, 5, 9)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def peak_memory_of(process: subprocess.Popen, stop: threading.Event, result: list) -> None:
    """Peak over the run of its process tree's proportional set size (shared pages, Ray's object store among them,
    split between the processes mapping them, so counted once) and of the machine's used memory."""
    tree_peak = used_peak = 0
    baseline = psutil.virtual_memory().used
    root = psutil.Process(process.pid)
    while not stop.is_set():
        try:
            tree = [root, *root.children(recursive=True)]
            tree_peak = max(tree_peak, sum(p.memory_full_info().pss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        used_peak = max(used_peak, psutil.virtual_memory().used - baseline)
        time.sleep(0.5)
    result.extend([tree_peak, used_peak])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="qwen2.5-1.5b-instruct")
    parser.add_argument("--features", choices=("on", "off"), default="on")
    parser.add_argument("--lora", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--workdir", default="/tmp/lm_at_size")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="the run's deadline")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    model, data = checkpoint(args.shape, workdir), problems(workdir)
    run_dir = workdir / f"run-{args.shape}-{args.features}-lora{args.lora}-{int(time.time())}"
    features = (["actor.micro_batch_size=1", "actor.activation_checkpointing=true"] if args.features == "on" else [])
    command = [sys.executable, "-m", "embodied_rl.cli", "train", "--task", "math_jsonl", "--run-dir", str(run_dir),
               f"model.name={model}", f"env.path={data}", "env.prompt_field=question", "env.answer_field=answer",
               "sft.steps=0", "rl.iterations=1", f"rl.prompts_per_iteration={args.prompts}",
               f"algorithm.group_size={args.group_size}", "algorithm.kl_coef=0.001",
               f"rollout.max_new_tokens={args.new_tokens}", "eval.every_iterations=0", "eval.num_problems=1",
               "checkpoint.every_iterations=1", "torch_threads=2", f"actor.lora_rank={args.lora}", *features]
    start = time.perf_counter()
    process = subprocess.Popen(command)
    stop, result = threading.Event(), []
    sampler = threading.Thread(target=peak_memory_of, args=(process, stop, result))
    sampler.start()
    try:
        code = process.wait(timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        process.terminate()  # the train command writes a stop checkpoint and stops its workers
        code = process.wait(timeout=660)  # its own deadline to stop is 600 s
        print(f"the run passed --timeout-s={args.timeout_s:g} and was stopped", file=sys.stderr)
    stop.set()
    sampler.join(timeout=10)  # one sample takes well under a second
    print(json.dumps({"shape": args.shape, "features": args.features, "lora": args.lora, "exit_code": code,
                      "wall_s": round(time.perf_counter() - start, 1), "peak_pss_gib": round(result[0] / 2 ** 30, 2),
                      "peak_machine_used_gib": round(result[1] / 2 ** 30, 2),
                      "run_dir": str(run_dir)}))
    return code


if __name__ == "__main__":
    sys.exit(main())
