"""``embodied-rl sweep``: a grid or random search over config keys and seeds, one Ray Tune trial per point, each
trial an ``embodied-rl train`` run; at the end the trials' table and ``embodied-rl report`` of all runs.

Where it runs: on the local Ray this command starts (all of this machine's CPUs), or with ``--ray-address`` on
the cluster a run would join, Tune placing trials on its nodes. Each trial asks Tune for what its placement takes:
``placement.slots`` CPU cores (default: this machine's core count), or on GPU machines one CPU and
``placement.slots`` GPUs
(default 1); trials run side by side as far as those requests fit (``--max-concurrent`` caps them).

``--early-stop asha``: Tune's asynchronous successive halving on evaluation success against env steps stops
trials that trail the others at each rung (``--grace-env-steps`` before the first cut).

Output (``--out``, default ``sweeps/<task>-<time>``): ``runs/<trial>/`` (run directories), ``logs/<trial>.log``,
``trials.json``, ``report/`` and Tune's own state in ``tune/``.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from embodied_rl.config.errors import ConfigError
from embodied_rl.sweep.space import SearchSpace, build_space, override_text
from embodied_rl.utils.atomic import write_text_atomic

EARLY_STOPPING = ("none", "asha")


def _check_points(task: str, config_file: str | None, overrides: list[str], space: SearchSpace):
    """Every swept value loads (bad keys and values fail here, in one line, before any trial); returns the
    config of the first point (its placement sizes the trials)."""
    from embodied_rl.config.stages import load_stages

    first = {key: values[0] for key, values in space.grid.items()}
    base, stages = load_stages(task, config_file, [*overrides, *(override_text(k, v) for k, v in first.items())])
    for key, values in space.grid.items():
        for value in values[1:]:
            load_stages(task, config_file, [*overrides, override_text(key, value)])
    for key, (_, arguments) in space.sampled.items():  # a choice's values, a range's bounds
        for value in arguments:
            load_stages(task, config_file, [*overrides, override_text(key, value)])
    return base, stages


def trial_resources(config) -> dict:
    """Tune's resource request of one trial, from the run's placement."""
    from embodied_rl.config.schema import slots_are_gpus

    slots = config.placement.slots
    if slots_are_gpus(config):
        return {"cpu": 1, "gpu": slots or 1}
    return {"cpu": slots or (os.cpu_count() or 1)}


def run_sweep(task: str, config_file: str | None, overrides: list[str], grid: list[str], sample: list[str],
              seeds: str, samples: int, out: str | None, ray_address: str | None, max_concurrent: int | None,
              early_stop: str, grace_env_steps: int | None, report: bool = True) -> int:
    if not task:
        raise ConfigError("no task given; pass --task NAME (see `embodied-rl tasks`)")
    if early_stop not in EARLY_STOPPING:
        raise ConfigError(f"--early-stop={early_stop!r}; allowed: {', '.join(EARLY_STOPPING)}")
    if max_concurrent is not None and max_concurrent < 1:
        raise ConfigError(f"--max-concurrent={max_concurrent}: allowed: an integer >= 1")
    for override in overrides:
        if override.split("=", 1)[0] in ("seed", "run_dir", "cluster.address"):
            raise ConfigError(f"{override!r}: a sweep sets this per trial; sweep seeds with --seeds")
    space = build_space(grid or [], sample or [], seeds, samples)
    base, stages = _check_points(task, config_file, overrides, space)
    out_dir = Path(out or Path("sweeps") / f"{task}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ConfigError(f"--out {out_dir} already exists and is not empty; choose another directory")
    resources = trial_resources(stages[-1].config)
    total_steps = sum(stage.config.total_env_steps for stage in stages if stage.config.algorithm.name != "sft")
    print(f"sweep: {space.trials} trials ({len(space.seeds)} seeds), each asking for "
          f"{', '.join(f'{v} {k.upper()}' for k, v in resources.items())}; output in {out_dir}", flush=True)

    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from embodied_rl.runtime.cluster import Cluster
    from embodied_rl.sweep.trial import run_trial

    out_dir.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(ray_address).start()
    try:
        scheduler = None
        if early_stop == "asha":
            grace = grace_env_steps or max(total_steps // 4, 1)
            # max_t past the budget: ASHA stops a trial whose report reaches max_t, and the last evaluation of a
            # trial that trains to its end must not count as a stop.
            scheduler = ASHAScheduler(time_attr="env_steps", max_t=max(total_steps, grace) + 1, grace_period=grace,
                                      reduction_factor=2)
        sweep = {"task": task, "config_file": str(Path(config_file).resolve()) if config_file else None,
                 "overrides": list(overrides), "out_dir": str(out_dir),
                 "cpus": resources["cpu"] if "gpu" not in resources else None}
        tuner = tune.Tuner(
            tune.with_resources(tune.with_parameters(run_trial, sweep=sweep), resources),
            param_space=space.tune_space(),
            tune_config=tune.TuneConfig(metric="success", mode="max", scheduler=scheduler, num_samples=samples,
                                        max_concurrent_trials=max_concurrent),
            run_config=tune.RunConfig(name="tune", storage_path=str(out_dir), verbose=1,
                                      failure_config=tune.FailureConfig(max_failures=0)))
        started = time.perf_counter()
        results = tuner.fit()
        wall = time.perf_counter() - started
    finally:
        cluster.shutdown()
    trials = _trial_rows(results)
    failed = [row for row in trials if row["status"] == "error"]
    write_text_atomic(out_dir / "trials.json", json.dumps({"wall_s": wall, "trials": trials}, indent=2) + "\n")
    for row in trials:
        success = "-" if row["success"] is None else f"{row['success']:.3f}"
        print(f"{row['trial']}: {row['status']}, success {success} at {row['env_steps']:.0f} env steps", flush=True)
    print(f"sweep: {len(trials)} trials in {wall:.0f} s ({len(failed)} failed); trials.json in {out_dir}",
          flush=True)
    if report and (out_dir / "runs").is_dir() and any((out_dir / "runs").iterdir()):
        from embodied_rl.commands.report import run_report

        run_report([str(out_dir / "runs")], str(out_dir / "report"), f"sweep of {task}", None, None, 20.0, False)
    return 1 if failed else 0


def _trial_rows(results) -> list[dict]:
    """One row per Tune result: ``status`` done (trained to its end), stopped early (by the scheduler) or error."""
    rows = []
    for result in results:
        metrics = result.metrics or {}
        config = result.config or {}
        status = "error" if result.error else ("done" if metrics.get("finished") else "stopped early")
        success = metrics.get("success")
        rows.append({"trial": metrics.get("trial") or (Path(result.path).name if result.path else "?"),
                     "status": status,
                     "overrides": {k: str(v) for k, v in config.get("overrides", {}).items()},
                     "seed": config.get("seed"),
                     "success": None if success is None or (isinstance(success, float) and math.isnan(success))
                     else float(success),
                     "env_steps": float(metrics.get("env_steps", 0.0)),
                     "error": str(result.error).splitlines()[-1][:300] if result.error else None})
    return rows
