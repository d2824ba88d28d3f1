"""The largest OpenVLA-OFT this machine's memory takes through one RL iteration, with the memory features on and off.

One iteration: the policy built (random weights, the published architecture), ``act`` on ``--rows`` camera
observations (the rollout), then the actor's update on them: PPO's token-level loss, backward, one Adam step at
5e-6. Models: the full OpenVLA-OFT (SigLIP so400m + DINOv2 ViT-L, Llama-2-7B width) with its language model cut to
``L`` of its 32 layers (L=32: the published 7.6B). Both settings train LoRA rank 32 adapters and the heads, as the
recipes do:

* features on: the network built and kept in bf16 (``built_in``), float32 master weights of the trained ones,
  autocast, micro-batches of one row (``actor.micro_batch_size=1``), activation checkpointing;
* features off: float32 weights, the minibatch in one pass, every activation kept.

Each size runs in a process of its own whose resident memory is watched: past ``--memory-gib`` (default: the
machine's memory less 1.5 GiB for the system) it stops and counts as not fitting, before the kernel's OOM killer
would. The search goes down from the largest size until one fits.

    python scripts/largest_model_cpu.py                     # both settings, prints a table and JSON
    python scripts/largest_model_cpu.py --one on 32         # one size, one setting (what the search runs)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

GIB = 2 ** 30
LAYERS = (32, 28, 24, 20, 16, 12, 8, 4)
OVER_BUDGET = 3  # exit code of a run stopped by the memory watch


def machine_gib() -> float:
    with open("/proc/meminfo") as file:
        return int(file.readline().split()[1]) * 1024 / GIB


def rss_gib() -> float:
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / GIB


def watch_memory(budget_gib: float) -> None:
    """Stop this process (exit ``OVER_BUDGET``) as soon as its resident memory passes ``budget_gib``."""
    def watch():
        while True:
            if rss_gib() > budget_gib:
                print(json.dumps({"over_budget_gib": round(rss_gib(), 2)}), flush=True)
                os._exit(OVER_BUDGET)
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()


def cut_language_model(layers: int) -> None:
    """Make ``policy.size=full`` in this process the published OpenVLA-OFT with ``layers`` of its 32 language-model
    layers."""
    from embodied_rl.models.openvla import configuration

    full = configuration.full

    def cut() -> configuration.OpenVLAConfig:
        config = full()
        config.language.layers = layers
        return config

    configuration.PRESETS["full"] = cut


def one_iteration(features: bool, layers: int, rows: int) -> dict:
    """Build, act, update once; the peak resident memory and each phase's seconds."""
    import numpy as np
    import torch

    from embodied_rl.algorithms.embodied import ALGORITHMS
    from embodied_rl.algorithms.embodied.ppo import PPOConfig
    from embodied_rl.models import build_policy
    from embodied_rl.workers.micro_batches import minibatch_loss

    cut_language_model(layers)
    seconds = {}
    start = time.perf_counter()
    policy = build_policy("openvla_oft", obs_dim=9, action_dim=7, size="full", lora_rank=32, action_chunk=8,
                          obs_shapes={"rgb": [224, 224, 3], "state": [9]},
                          dtype="bfloat16" if features else "float32")
    if features:
        policy.enable_activation_checkpointing()
    seconds["build"] = time.perf_counter() - start
    parameters = sum(p.numel() for p in policy.parameters())
    trained = [p for p in policy.parameters() if p.requires_grad]
    generator = torch.Generator().manual_seed(0)
    obs = {"rgb": torch.randint(0, 256, (rows, 224, 224, 3), dtype=torch.uint8, generator=generator),
           "state": torch.randn(rows, 9, generator=generator),
           "instruction": np.array(["push the cube to the goal"] * rows)}
    start = time.perf_counter()
    with torch.no_grad():
        actions, logp, values, *stored = policy.act(obs)
    seconds["act"] = time.perf_counter() - start
    if stored:
        obs = {**obs, **stored[0]}
    algorithm = ALGORITHMS.get("ppo")(PPOConfig(ratio_level="token", normalize_advantages=False))
    algorithm.updates = 1  # past the critic's warm-up update
    batch = dict(obs=obs, actions=actions, old_logp=logp, old_values=values, advantages=torch.ones(rows),
                 returns=torch.zeros(rows))
    optimizer = torch.optim.Adam(trained, lr=5e-6, eps=1e-5)
    start = time.perf_counter()
    _, _, backward = minibatch_loss(lambda part: algorithm.evaluate(policy, part), algorithm.loss, batch, rows,
                                    1 if features else None)
    backward()
    seconds["evaluate_backward"] = time.perf_counter() - start
    before = [p.detach().clone() for p in trained[:4]]
    start = time.perf_counter()
    optimizer.step()
    seconds["adam_step"] = time.perf_counter() - start
    moved = sum(not torch.equal(b, p.detach()) for b, p in zip(before, trained[:4]))
    return {"features": "on" if features else "off", "layers": layers, "rows": rows,
            "parameters_b": round(parameters / 1e9, 3), "trained_m": round(sum(p.numel() for p in trained) / 1e6, 1),
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, 2),
            "seconds": {k: round(v, 1) for k, v in seconds.items()}, "adam_moved": f"{moved}/4 checked tensors",
            "fits": True}


def run_one(features: str, layers: int, rows: int, budget_gib: float, threads: int) -> dict:
    """``one_iteration`` in a process of its own (first to go if the kernel must kill one)."""
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, __file__, "--one", features, str(layers), "--rows", str(rows), "--memory-gib",
               str(budget_gib), "--threads", str(threads)]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True,
                          preexec_fn=lambda: Path("/proc/self/oom_score_adj").write_text("1000"))
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {}
    result.update(features=features, layers=layers, wall_s=round(time.perf_counter() - started, 1))
    if done.returncode != 0:
        result["fits"] = False
        result["why"] = ("resident memory past the budget" if done.returncode == OVER_BUDGET else
                         f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:200]}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--one", nargs=2, metavar=("on|off", "LAYERS"))
    parser.add_argument("--rows", type=int, default=2, help="observations per iteration (default 2)")
    parser.add_argument("--memory-gib", type=float, default=round(machine_gib() - 1.5, 1))
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--settings", default="on,off")
    args = parser.parse_args()
    if args.one:
        import torch

        torch.set_num_threads(args.threads)
        watch_memory(args.memory_gib)
        print(json.dumps(one_iteration(args.one[0] == "on", int(args.one[1]), args.rows)), flush=True)
        return 0
    print(f"memory budget {args.memory_gib} GiB of {machine_gib():.1f}; {args.rows} rows; language-model layers "
          f"tried {LAYERS}", flush=True)
    results = []
    for features in args.settings.split(","):
        for layers in LAYERS:
            result = run_one(features, layers, args.rows, args.memory_gib, args.threads)
            results.append(result)
            print(json.dumps(result), flush=True)
            if result.get("fits"):
                break
    print(json.dumps({"largest": {r["features"]: r for r in results if r.get("fits")}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
