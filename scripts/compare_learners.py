#!/usr/bin/env python
"""PPO, GRPO, SAC and RLPD side by side from one SFT checkpoint and one env-step budget.

    python scripts/compare_learners.py --task maniskill_pickcube --env-steps 40000 --out runs/compare

1. SFT: the task recipe's SFT stage with the ``mlp_sac`` policy (tanh Gaussian with Q critics and a value head,
   so every learner below trains the same network), once.
2. Each learner starts from that stage's best checkpoint (``init_from``) in the recipe's RL stage settings (env,
   time limit, action chunks, features) with ``--env-steps`` env steps, evaluated every ``--eval-every``
   iterations on the same fixed states (``eval.seed``) at the task's limit.
3. Prints (and writes to ``<out>/comparison.md``) success against env steps and against wall time.

Learner settings are in ``LEARNERS`` (a learner's ``policy_options`` go to its policy, the rest to its algorithm);
command-line ``--set learner.key=value`` changes one.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

LEARNERS = {
    # The recipe's own GRPO stage (success scores, groups of 4, lr 3e-5).
    "grpo": {},
    # PPO on the dense reward with a critic warm-up and a faster critic (its value head starts untrained).
    "ppo": {"name": "ppo", "lr": 3.0e-5, "gamma": 0.8, "gae_lambda": 0.9, "update_epochs": 4,
            "num_minibatches": 8, "target_kl": 0.1, "critic_lr_scale": 30.0, "critic_warmup_updates": 5},
    # SAC on the dense reward fine-tuning the clone: a residual on the frozen clone (the actor starts as the clone),
    # a KL term holding it near the clone, the temperature aiming at the clone's own entropy, critics warmed up
    # first. Without the first three the clone was lost within ~40 actor steps (docs/results.md).
    "sac": {"name": "sac", "lr": 1.0e-4, "critic_lr": 3.0e-4, "gamma": 0.8, "init_alpha": 0.01,
            "learning_starts": 1600, "critic_warmup_steps": 400, "utd_ratio": 0.25, "batch_size": 256,
            "clone_kl_weight": 0.1, "clone_entropy_target": True, "policy_options": {"residual": True}},
    # RLPD: the same, with the SFT demonstrations in half of every batch.
    "rlpd": {"name": "rlpd", "lr": 1.0e-4, "critic_lr": 3.0e-4, "gamma": 0.8, "init_alpha": 0.01,
             "learning_starts": 1600, "critic_warmup_steps": 400, "utd_ratio": 0.25, "batch_size": 256,
             "clone_kl_weight": 0.1, "clone_entropy_target": True, "policy_options": {"residual": True}},
}


def recipe_stages(task: str) -> tuple[dict, dict]:
    from embodied_rl.config.loader import task_recipe

    recipe = OmegaConf.to_container(task_recipe(task), resolve=True)
    stages = recipe.get("stages") or []
    if len(stages) < 2 or (stages[0].get("algorithm") or {}).get("name") != "sft":
        raise SystemExit(f"{task}: its recipe has no SFT stage followed by an RL stage")
    return stages[0], stages[1]


def train(task: str, stage: dict, run_dir: Path, log) -> float:
    """One stage as the only stage of a run in ``run_dir``; returns its wall time."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config = run_dir.parent / f"{run_dir.name}.yaml"
    config.write_text(OmegaConf.to_yaml({"stages": [stage]}))
    start = time.perf_counter()
    command = ["embodied-rl", "train", "--task", task, "--config", str(config), "--run-dir", str(run_dir)]
    print("$", " ".join(command), file=log, flush=True)
    subprocess.run(command, check=True, stdout=log, stderr=log)
    return time.perf_counter() - start


def evaluations(run_dir: Path) -> list[dict]:
    (stage_dir,) = [p for p in run_dir.iterdir() if p.is_dir() and (p / "metrics.jsonl").exists()]
    rows = [json.loads(line) for line in (stage_dir / "metrics.jsonl").read_text().splitlines()]
    return [{"env_steps": r["env_steps"], "elapsed_s": r.get("time/elapsed_s", float("nan")),
             "success": r["eval/success_once"]} for r in rows if "eval/success_once" in r]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="maniskill_pickcube")
    parser.add_argument("--env-steps", type=int, default=40000)
    parser.add_argument("--learners", default="ppo,grpo,sac,rlpd")
    parser.add_argument("--eval-every", type=int, default=10, help="iterations between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=128)
    parser.add_argument("--out", type=Path, default=Path("runs/compare"))
    parser.add_argument("--set", action="append", default=[], help="learner.key=value (e.g. sac.lr=3e-4)")
    args = parser.parse_args()
    learners = args.learners.split(",")
    for name in learners:
        if name not in LEARNERS:
            parser.error(f"--learners: {name!r} is not one of {', '.join(LEARNERS)}")
    settings = copy.deepcopy(LEARNERS)
    for item in args.set:
        key, _, value = item.partition("=")
        learner, _, field = key.partition(".")
        if learner not in settings or not field or not value:
            parser.error(f"--set {item!r}: expected learner.key=value with a learner of {', '.join(LEARNERS)}")
        parsed = OmegaConf.from_dotlist([f"v={value}"]).v
        if field.startswith("policy_options."):
            settings[learner].setdefault("policy_options", {})[field.partition(".")[2]] = parsed
        else:
            settings[learner][field] = parsed

    sft_stage, rl_stage = recipe_stages(args.task)
    policy = dict(sft_stage.get("policy") or {}, name="mlp_sac")
    policy["options"] = dict(policy.get("options") or {}, critic_layer_norm=True)
    evaluation = {"every_iterations": args.eval_every, "num_episodes": args.eval_episodes, "sampled": False,
                  "video_episodes": 0}
    args.out.mkdir(parents=True, exist_ok=True)
    log = open(args.out / "compare.log", "a")
    sft_dir = args.out / "sft"
    if not (sft_dir / "summary.json").exists():
        stage = dict(copy.deepcopy(sft_stage), policy=policy,
                     eval=dict(sft_stage.get("eval") or {}, num_episodes=args.eval_episodes, sampled=False))
        train(args.task, stage, sft_dir, log)
    (checkpoint,) = sorted((sft_dir / "0-sft" / "best_checkpoint").iterdir())
    results = {"sft": evaluations(sft_dir)[-1]["success"]}
    sft_algorithm = sft_stage["algorithm"]
    for name in learners:
        learner = dict(settings[name])
        learner_policy = dict(policy, options={**policy["options"], **learner.pop("policy_options", {})})
        algorithm = dict(copy.deepcopy(rl_stage["algorithm"]), **learner) if name == "grpo" else learner
        if name == "rlpd":  # the demonstrations SFT cloned
            algorithm.update({k: sft_algorithm[k] for k in ("demo_episodes", "demo_planner_speed")
                              if k in sft_algorithm})
        stage = dict(copy.deepcopy(rl_stage), name=name, policy=learner_policy, algorithm=algorithm,
                     total_env_steps=args.env_steps, init_from=str(checkpoint), eval=evaluation,
                     checkpoint={"every_iterations": 0})
        run_dir = args.out / name
        done = run_dir / "result.json"  # a learner already run into this --out is read back, not run again
        if not done.exists():
            wall = train(args.task, stage, run_dir, log)
            done.write_text(json.dumps({"wall_s": wall, "evaluations": evaluations(run_dir)}, indent=1))
        results[name] = json.loads(done.read_text())
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(report(args, results))
    (args.out / "comparison.md").write_text(report(args, results))


def report(args, results: dict) -> str:
    lines = [f"{args.task}: success_once on {args.eval_episodes} fixed states (deterministic) from one SFT "
             f"checkpoint (SFT: {results['sft']:.3f}), {args.env_steps} env steps each", "",
             "| learner | evaluations: env steps -> success (minutes into the run) | best | last | wall |",
             "|---|---|---|---|---|"]
    for name, result in results.items():
        if name == "sft":
            continue
        points = result["evaluations"]
        curve = ", ".join(f"{p['env_steps'] // 1000}k -> {p['success']:.3f} ({p['elapsed_s'] / 60:.1f})"
                          for p in points)
        best = max(p["success"] for p in points) if points else float("nan")
        last = points[-1]["success"] if points else float("nan")
        lines.append(f"| {name} | {curve} | {best:.3f} | {last:.3f} | {result['wall_s'] / 60:.1f} min |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
