"""``embodied-rl bench overlap``: synchronous vs overlapped (``rollout.max_staleness=1``) training on one placement.

Both runs train the task's own config (PushCube: PPO from scratch) with sampling on core 0 (env workers running
their own policies, ``rollout.inline``) and the actor on core 1, the placement overlap needs; the synchronous run
uses the same placement. Each run is
evaluated every ``--eval-every`` iterations on ``--eval-episodes`` episodes and ends at the first evaluation that
reaches ``--target`` (``eval.stop_at_success``) or at ``--max-env-steps``. Per run: training env steps/s and
training seconds to the target, both with the evaluations' time taken out, and env steps to the target; the ratios
overlapped / synchronous. The overlapped run uses decoupled PPO (``OVERLAPPED``). Also the bare simulator loop on
the sampling core: the same envs stepped in this process (pinned to core 0) with the same policy's inference
inline, no Ray, no channels, no training; the training runs' env steps/s are given as a share of it.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from embodied_rl.bench import print_report, require_at_least_one
from embodied_rl.config import ConfigError, load_train_config

PLACEMENT = "placement.components={'env,rollout': '0', 'actor': '1'}"
INLINE = "rollout.inline=true"
"""Env and rollout share core 0, so the env workers run their own policies (no rollout process, no channel round
trip per step; ``rollout.inline=false`` as an override measures the rollout worker instead): in one pair of runs
here this took the synchronous run from 0.462 to 0.545 of the bare loop and the overlapped one from 0.640 to
0.715."""
OVERLAPPED = ["rollout.max_staleness=1", "algorithm.off_policy_correction=decoupled"]
"""With plain PPO the update's KL to the one-version-old sampling policy starts near ``target_kl``: in one run here
the overlapped run's updates stopped after 40 of 128 minibatch steps on average (some after 0), and it reached
0.45 eval success in 120k env steps where the synchronous run reached 0.82. Decoupled PPO measures the trust
region from the weights each update starts with."""


def training_figures(run_dir: Path, target: float) -> dict:
    """From a run's metrics.jsonl: env steps/s over its training time (wall time less its evaluations), and the
    training seconds and env steps at its first evaluation with success_once >= ``target`` (None if none did)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evaluations_before, reached = 0.0, None
    training_s = 0.0
    for row in rows:
        # time/elapsed_s is taken before the row's own evaluation; it includes the earlier evaluations
        training_s = row["time/elapsed_s"] - evaluations_before
        if reached is None and row.get("eval/success_once", -1.0) >= target:
            reached = {"seconds_to_target": round(training_s, 1), "env_steps_to_target": row["env_steps"],
                       "success_at_target": row["eval/success_once"]}
        evaluations_before += row.get("time/eval_s", 0.0)
    last = rows[-1]
    return {"time_per_iteration": time_breakdown(rows), "iterations": last["train/iteration"],
            "env_steps": last["env_steps"],
            "training_s": round(training_s, 1), "env_steps_per_s": round(last["env_steps"] / training_s, 1),
            "best_eval_success": max((r["eval/success_once"] for r in rows if "eval/success_once" in r),
                                     default=None),
            **(reached or {"seconds_to_target": None, "env_steps_to_target": None})}


def time_breakdown(rows: list[dict]) -> dict:
    """Where a run's iterations went, mean seconds per iteration (the first iteration, start-up, left out):
    sampling (the driver's wait for rounds: env steps, inference, channels), the update (the actor's, waited for),
    weight sync, and the rest of the iteration (turn switches, resizes, the driver's bookkeeping between them), and
    during sampling the env workers' share of waiting for actions."""
    trained = [r for r in rows[1:] if "time/sample_s" in r] or [r for r in rows if "time/sample_s" in r]
    if not trained:
        return {}
    mean = lambda key: float(np.mean([r.get(key, 0.0) for r in trained]))  # noqa: E731
    figures = {"iteration_s": mean("time/iteration_s"), "sample_s": mean("time/sample_s"),
               "update_s": mean("time/update_wall_s"), "weight_sync_s": mean("time/sync_s")}
    figures["other_s"] = figures["iteration_s"] - figures["sample_s"] - figures["update_s"] - figures["weight_sync_s"]
    figures = {k: round(v, 4) for k, v in figures.items()}
    if any("time/env_waiting_share" in r for r in trained):
        figures["env_waiting_share_of_sampling"] = round(mean("time/env_waiting_share"), 3)
    return figures


def bare_loop_steps_per_s(config, steps: int, core: int = 0) -> float:
    """Env steps/s of the run's envs (``env.num_workers x env.envs_per_worker``, in this process) stepped with the
    policy's sampled actions, on ``core`` with one torch thread."""
    import sim_envs
    from embodied_rl.models import build_policy
    from embodied_rl.runners.setup import env_options

    affinity, threads = os.sched_getaffinity(0), torch.get_num_threads()
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    envs = sim_envs.make(config.task, config.env.num_workers * config.env.envs_per_worker, processes=False,
                         seed=config.seed, **env_options(config))
    try:
        obs = envs.reset()
        policy = build_policy(config.policy.name, obs.shape[1], envs.single_action_shape[0],
                              hidden_sizes=list(config.policy.hidden_sizes))
        with torch.no_grad():
            for _ in range(5):  # warm-up
                obs = envs.step(policy.act(torch.as_tensor(obs))[0].numpy()).obs
            start = time.perf_counter()
            for _ in range(steps):
                obs = envs.step(policy.act(torch.as_tensor(obs))[0].numpy()).obs
        return steps * envs.num_envs / (time.perf_counter() - start)
    finally:
        envs.close()
        os.sched_setaffinity(0, affinity)
        torch.set_num_threads(threads)


def run_overlap_bench(task: str, target: float, max_env_steps: int, eval_every: int, eval_episodes: int,
                      as_json: bool, overrides: list[str] | None = None) -> int:
    from embodied_rl.runners.embodied import EmbodiedRunner

    require_at_least_one(max_env_steps=max_env_steps, eval_every=eval_every, eval_episodes=eval_episodes)
    if not 0 < target <= 1:
        raise ConfigError(f"--target={target} is out of range; allowed: a success rate in (0, 1]")
    if (os.cpu_count() or 1) < 2:
        raise ConfigError("bench overlap needs 2 cores (sampling on core 0, the actor on core 1); this machine has 1")
    # stages=[]: the task's own config (PushCube: PPO from scratch), not its staged recipe
    settings = ["stages=[]", PLACEMENT, INLINE, f"total_env_steps={max_env_steps}",
                f"eval.every_iterations={eval_every}", f"eval.num_episodes={eval_episodes}",
                f"eval.stop_at_success={target}",
                "checkpoint.every_iterations=0", *(overrides or [])]
    result: dict = {"task": task, "target_success": target, "eval_episodes": eval_episodes}
    with tempfile.TemporaryDirectory(prefix="bench-overlap-") as root:
        for mode, extra in (("synchronous", ["rollout.max_staleness=0"]), ("overlapped", OVERLAPPED)):
            config = load_train_config(task, None, [*settings, *extra])
            if config.env.obs_mode != "state":
                raise ConfigError(f"bench overlap trains a state-observation task's own config; {task} has "
                                  f"env.obs_mode={config.env.obs_mode!r}")
            run_dir = Path(root) / mode
            EmbodiedRunner(config, run_dir).run()
            result[mode] = training_figures(run_dir, target)
        result["envs"] = config.env.num_workers * config.env.envs_per_worker
        result["placement"] = ("env workers with inline policies on core 0, actor on core 1" if config.rollout.inline
                               else "env and rollout workers on core 0, actor on core 1")
        bare = bare_loop_steps_per_s(config, steps=100)
    sync, over = result["synchronous"], result["overlapped"]
    result["ratio_steps_per_s_overlapped_over_synchronous"] = round(
        over["env_steps_per_s"] / sync["env_steps_per_s"], 3)
    if sync["seconds_to_target"] and over["seconds_to_target"]:
        result["ratio_seconds_to_target_overlapped_over_synchronous"] = round(
            over["seconds_to_target"] / sync["seconds_to_target"], 3)
    result["bare_loop_env_steps_per_s_on_core_0"] = round(bare, 1)
    result["synchronous_share_of_bare_loop"] = round(sync["env_steps_per_s"] / bare, 3)
    result["overlapped_share_of_bare_loop"] = round(over["env_steps_per_s"] / bare, 3)
    print_report(result, as_json)
    return 0
