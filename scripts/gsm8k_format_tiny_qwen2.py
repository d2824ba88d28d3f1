"""A GSM8K-format JSONL run on a tiny Qwen2 checkpoint (random weights, a byte-level BPE tokenizer trained here,
saved by save_pretrained in float32: bf16 autocast is slow on this CPU), through the GSM8K recipe's prompt and
answer format with CPU-sized settings:

    python scripts/gsm8k_format_tiny_qwen2.py [--workdir /tmp/gsm8k_tiny] [--sft-steps 600] [--rl-iterations 60]

Problems: one-step word problems ("Tom has 17 apples and buys 5 more. How many apples does he have?") whose answers
are worked solutions ending in "#### 22", 2,000 for training and 200 held out. SFT on the worked solutions, then
GRPO; held-out accuracy (greedy, "####" answers verified) at the start, after SFT and every 10 RL iterations."""

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

NAMES = ["Tom", "Ann", "Raj", "Mia", "Leo", "Zoe"]
THINGS = ["apples", "books", "coins", "stamps", "shells", "marbles"]


def problem(rng: random.Random) -> dict:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(2, 49), rng.randint(2, 49)
    if rng.random() < 0.5:
        question = f"{name} has {a} {thing} and buys {b} more. How many {thing} does {name} have?"
        answer = f"{name} has {a} + {b} = {a + b} {thing}.\n#### {a + b}"
    else:
        a, b = max(a, b), min(a, b)
        question = f"{name} has {a} {thing} and gives away {b}. How many {thing} does {name} have left?"
        answer = f"{name} has {a} - {b} = {a - b} {thing} left.\n#### {a - b}"
    return {"question": question, "answer": answer}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default="/tmp/gsm8k_tiny")
    parser.add_argument("--sft-steps", type=int, default=600)
    parser.add_argument("--rl-iterations", type=int, default=60)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per RL iteration (8 answers each)")
    parser.add_argument("--rl-lr", type=float, default=1e-4)
    args = parser.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    seen, rows = set(), []
    while len(rows) < 2200:
        row = problem(rng)
        if row["question"] not in seen:
            seen.add(row["question"])
            rows.append(row)
    (work / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2000]))
    (work / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[2000:]))
    from embodied_rl.models.causal_lm.tiny_checkpoints import default_corpus, write_tiny_checkpoint

    checkpoint = work / "qwen2-tiny"
    if not (checkpoint / "config.json").is_file():
        corpus = default_corpus() + [r["question"] + " " + r["answer"] for r in rows[:2000]]
        # float32 weights: on a CPU without bf16 matrix units autocast to bf16 is several times slower
        write_tiny_checkpoint(checkpoint, "qwen2", dtype="float32", size={"hidden_size": 128, "num_hidden_layers": 4,
                                                         "intermediate_size": 384, "num_attention_heads": 4,
                                                         "num_key_value_heads": 2, "max_position_embeddings": 512},
                              corpus=corpus)
    command = [sys.executable, "-m", "embodied_rl.cli", "train", "--task", "math_jsonl",
               "--config", "configs/recipes/reasoning/gsm8k_1gpu.yaml", "--run-dir", str(work / "run"),
               f"model.name={checkpoint}", f"env.path={work / 'train.jsonl'}",
               f"env.heldout_path={work / 'test.jsonl'}", "placement.components={'env,rollout,actor': '0-1'}",
               "rollout.max_new_tokens=24", f"sft.steps={args.sft_steps}", "sft.batch_size=32", "sft.lr=3e-3",
               f"rl.iterations={args.rl_iterations}", f"rl.prompts_per_iteration={args.prompts}",
               f"rl.lr={args.rl_lr}",
               "rl.warmup_iterations=0", "rl.num_minibatches=1", "algorithm.kl_coef=0", "actor.micro_batch_size=64",
               "actor.activation_checkpointing=false", "eval.every_iterations=10", "eval.num_problems=200",
               "eval.samples_per_problem=0", "checkpoint.every_iterations=50", "torch_threads=2"]
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
