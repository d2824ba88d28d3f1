"""``embodied-rl bench placement --task math_arith``: seconds per RL iteration of a text run in each placement of its
generation (rollout) workers and trainer (actor), measured alternately in one run on one Ray:

* ``collocated``: everything on slots 0-1; generation and training take turns, the idle side offloaded
  (``placement.offload=auto``; on a CPU-only machine the moves are free and free nothing: the turns' bookkeeping
  is what is measured), weights through the object store;
* ``split``: env and generation on slot 0, the trainer on slot 1, synchronous, weights broadcast;
* ``split_async``: the same with ``rollout.max_staleness=1`` (the next batch generated beside the update);
* ``hybrid``: env and generation on slots 0-1, the trainer on slot 1 (they share slot 1), synchronous.

Each measurement is a short run from one SFT warm start; the median over ``--repeats`` of each run's mean
``time/iteration_s`` after its first two iterations is reported, with the mode ``Placement`` derives for it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from embodied_rl.bench import print_report, require_at_least_one
from embodied_rl.bench.reasoning_bench import BENCH_BATCH, _batch_label, _train, _warm_start, seconds_per_iteration
from embodied_rl.config import ConfigError
from embodied_rl.runtime import Cluster

TEXT_PLACEMENTS = {
    "collocated": ({"env,rollout,actor": "0-1"}, ["placement.offload=auto"]),
    "split": ({"env,rollout": "0", "actor": "1"}, []),
    "split_async": ({"env,rollout": "0", "actor": "1"}, ["rollout.max_staleness=1"]),
    "hybrid": ({"env,rollout": "0-1", "actor": "1"}, []),
}


def _placement_override(components: dict) -> str:
    return "placement.components={" + ", ".join(f"'{k}': '{v}'" for k, v in components.items()) + "}"


def run_text_placement_bench(task: str, iterations: int, repeats: int, sft_steps: int, as_json: bool,
                             overrides: list[str] | None = None) -> int:
    from embodied_rl.config.reasoning import load_reasoning_config, text_placement, weight_sync

    require_at_least_one(iterations=iterations, repeats=repeats)
    if (os.cpu_count() or 1) < 2:
        raise ConfigError("bench placement needs 2 slots (split puts generation and training on one each); this "
                          "machine has 1 core")
    skip = min(2, iterations - 1)
    common = ["torch_threads=1", "eval.every_iterations=0", "eval.num_problems=20", "checkpoint.every_iterations=0",
              f"rl.iterations={iterations}", *BENCH_BATCH, *(overrides or [])]
    configs = {mode: [_placement_override(components), *extra, *common]
               for mode, (components, extra) in TEXT_PLACEMENTS.items()}
    result: dict = {"task": task, "iterations": iterations, "skipped_warmup_iterations": skip, "repeats": repeats,
                    "batch": _batch_label(load_reasoning_config(task, None, common)), "modes": {}}
    for mode, settings in configs.items():
        c = load_reasoning_config(task, None, settings)
        placement, _ = text_placement(c)
        result["modes"][mode] = {"placement": placement.describe(), "weight_sync": weight_sync(c),
                                 "rollout.max_staleness": c.rollout.max_staleness}
    seconds: dict = {mode: [] for mode in configs}
    with tempfile.TemporaryDirectory(prefix="bench-text-placement-") as root, Cluster(None, None):
        start = _warm_start(Path(root), sft_steps, common)
        for repeat in range(repeats):
            for mode, settings in configs.items():
                rows = _train(Path(root) / f"{mode}-{repeat}", [*start, *settings], task)
                seconds[mode].append(seconds_per_iteration(rows, skip))
    for mode, values in seconds.items():
        result["modes"][mode]["seconds_per_iteration"] = round(float(np.median(values)), 4)
        result["modes"][mode]["each_repeat"] = [round(v, 4) for v in values]
    base = result["modes"]["collocated"]["seconds_per_iteration"]
    result["ratio_over_collocated"] = {mode: round(m["seconds_per_iteration"] / base, 3)
                                       for mode, m in result["modes"].items()}
    print_report(result, as_json)
    return 0
