"""``embodied-rl bench placement``: sampling throughput of collocated, disaggregated and hybrid (pipelined)
placements, with the same processes (env workers + one rollout worker), for two policies:

* ``mlp``: the state MLP, cheap next to a simulator step;
* ``transformer``: a small transformer whose inference on a batch costs about as much as stepping it.

All modes are measured alternately in one run on one local cluster. ``time_shares`` says where the time went:
the share of the wall time the env worker spent simulating and waiting for actions, and the rollout worker spent
inferring and waiting for requests.
"""

from __future__ import annotations

import json

import numpy as np

from embodied_rl.bench.env_bench import RuntimeLoop
from embodied_rl.bench import require_at_least_one
from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.config.schema import validate
from embodied_rl.runtime import Cluster

# mode -> (component slots, pipeline stages); the actor is placed but not started (sampling only).
MODES = {
    "collocated": ({"env,rollout,actor": "0-1"}, 1),
    "disaggregated": ({"env": "0", "rollout": "1", "actor": "1"}, 1),
    "hybrid_pipelined": ({"env,rollout,actor": "0-1"}, 2),
}
POLICIES = {
    "mlp": ["policy.name=mlp", "policy.hidden_sizes=[256,256,256]"],
    # d_model 512 over 2-value tokens: about 1.5 ms of inference per env, as much as a PickCube step costs here,
    # and nearly linear in the batch (so two half batches cost about what one whole batch does).
    "transformer": ["policy.name=transformer", "policy.hidden_sizes=[512]", "policy.options.token_size=2"],
}


def _config(task: str, overrides: list[str], components: dict, stages: int):
    config = load_train_config(task, None, [*overrides, f"env.pipeline_stages={stages}"])
    config.placement.components = components
    validate(config)
    return config


def run_placement_bench(task: str, env_workers: int, envs_per_worker: int, steps: int, repeats: int,
                        as_json: bool) -> int:
    require_at_least_one(env_workers=env_workers, envs_per_worker=envs_per_worker, steps=steps, repeats=repeats)
    if envs_per_worker < 2:
        raise ConfigError("--envs-per-worker must be >= 2: the hybrid mode splits them into 2 pipeline stages")
    base = [f"env.num_workers={env_workers}", f"env.envs_per_worker={envs_per_worker}", "rollout.num_workers=1"]
    rates: dict = {policy: {mode: [] for mode in MODES} for policy in POLICIES}
    shares: dict = {policy: {mode: [] for mode in MODES} for policy in POLICIES}
    with Cluster(num_cpus=2) as cluster:
        for policy, policy_overrides in POLICIES.items():
            # All modes stay alive so they can be measured alternately; each holds a share of the CPU slots.
            loops = {mode: RuntimeLoop(_config(task, [*base, *policy_overrides], *MODES[mode]), cluster,
                                       cluster_share=1 / len(MODES)) for mode in MODES}
            for loop in loops.values():
                loop.measure(5)
            for _ in range(repeats):
                for mode, loop in loops.items():
                    rates[policy][mode].append(loop.measure(steps))
                    shares[policy][mode].append(loop.last_breakdown)
            for loop in loops.values():
                loop.workers.shutdown()
    result: dict = {"task": task, "env_processes": env_workers, "envs_per_process": envs_per_worker,
                    "rollout_processes": 1, "steps_per_env": steps, "policies": {}}
    for policy, by_mode in rates.items():
        median = {mode: round(float(np.median(values)), 1) for mode, values in by_mode.items()}
        best_other = max(median["collocated"], median["disaggregated"])
        result["policies"][policy] = {
            "env_steps_per_s": median,
            "env_steps_per_s_each_repeat": {mode: [round(v, 1) for v in values] for mode, values in by_mode.items()},
            "hybrid_over_disaggregated": round(median["hybrid_pipelined"] / median["disaggregated"], 3),
            "hybrid_over_best_other": round(median["hybrid_pipelined"] / best_other, 3),
            "collocated_over_disaggregated": round(median["collocated"] / median["disaggregated"], 3),
            "time_shares": {mode: {key: round(float(np.median([row[key] for row in rows])), 3) for key in rows[0]}
                            for mode, rows in shares[policy].items()},
        }
    print(json.dumps(result) if as_json else json.dumps(result, indent=2))
    return 0
