"""``embodied-rl bench placement``: throughput of collocated, disaggregated (on 3+ cores; on 2, env apart from rollout
and actor, a hybrid) and hybrid pipelined placements,
with the same processes (env workers + one rollout worker, + the actor with ``--full-loop``), for the policies
``--policies`` names:

* ``mlp``: the state MLP, cheap next to a simulator step;
* ``transformer``: a small transformer whose inference on a batch costs about as much as stepping it;
* ``openvla_oft`` / ``pi0``: the tiny VLAs on camera observations (rgb + state + instruction), action chunks of 4
  (the camera renders only after each chunk).

Sampling only by default; ``--full-loop`` measures whole training iterations as the trainer runs them: sampling,
the actor's PPO update on the sampled batch, and the weight sync, in the turns ``PhaseTurns`` gives each phase.
Each run is labelled with the mode ``Placement`` itself derives from the slots (``derived_modes``). ``--auto``
adds the placement ``placement.auto`` chooses (profiled first, on the idle machine) and its rate against the best
preset's (``auto_over_best_preset``), with the profile's report; a choice equal to a preset (the same slots, stages
and rollout workers) is that preset's measurement, any other is measured beside them as ``auto``.

All modes are measured alternately in one run on one local cluster. ``time_shares`` says where the time went:
the share of the wall time the env worker spent simulating and waiting for actions, and the rollout worker spent
inferring and waiting for requests.
"""

from __future__ import annotations

import json
import os

import numpy as np

from embodied_rl.bench.env_bench import RuntimeLoop
from embodied_rl.bench import require_at_least_one
from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.config.schema import validate
from embodied_rl.runtime import Cluster

def placement_modes(cores: int) -> dict:
    """Run name -> (component slots, pipeline stages, slots); each name starts with the mode ``Placement`` derives
    for it. A disaggregated placement of three components needs three slots: on a 2-core machine its place is
    taken by ``hybrid_split`` (env on core 0, rollout and actor on core 1), named for what it is."""
    second = (("disaggregated", ({"env": "0", "rollout": "1", "actor": "2"}, 1, 3)) if cores >= 3 else
              ("hybrid_split", ({"env": "0", "rollout,actor": "1"}, 1, 2)))
    return {"collocated": ({"env,rollout,actor": "0-1"}, 1, 2), second[0]: second[1],
            "hybrid_pipelined": ({"env,rollout,actor": "0-1"}, 2, 2)}


POLICIES = {
    "mlp": ["policy.name=mlp", "policy.hidden_sizes=[256,256,256]"],
    # d_model 512 over 2-value tokens: about 1.5 ms of inference per env, as much as a PickCube step costs here,
    # and nearly linear in the batch (so two half batches cost about what one whole batch does).
    "transformer": ["policy.name=transformer", "policy.hidden_sizes=[512]", "policy.options.token_size=2"],
    "openvla_oft": ["policy.name=openvla_oft", "env.obs_mode=rgb", "policy.options.action_chunk=4"],
    "pi0": ["policy.name=pi0", "env.obs_mode=rgb", "policy.options.action_chunk=4"],
}
DEFAULT_POLICIES = "mlp,transformer"
FULL_LOOP = ["algorithm.name=ppo", "algorithm.update_epochs=1", "algorithm.num_minibatches=2",
             "algorithm.target_kl=null"]


class FullLoop:
    """Env, rollout and actor groups with the trainer's turns: one measurement = sample, PPO update, weight sync."""

    def __init__(self, config, cluster, cluster_share: float, lock_name: str):
        from embodied_rl.runners.setup import start_workers
        from embodied_rl.runners.device_turns import PhaseTurns
        from embodied_rl.runtime.device_lock import DeviceLock

        self.workers = start_workers(config, cluster, cluster_share=cluster_share)
        self.lock = DeviceLock.create(cluster.session_id, lock_name)
        self.turns = PhaseTurns(self.workers, self.lock, offload=config.placement.offload == "auto",
                                weight_sync=config.rollout.weight_sync)
        self.turns.start()
        self.num_envs = config.env.num_workers * config.env.envs_per_worker
        self.last_breakdown: dict = {}

    def measure(self, steps: int) -> float:
        import time

        import ray

        start = time.perf_counter()
        with self.turns.sampling():
            self.workers.sample(steps)
        with self.turns.training():
            update = ray.get(self.workers.actor.call("update", len(self.workers.env)))[0]
            self.turns.publish_weights()
        wall = time.perf_counter() - start
        self.last_breakdown = {"update_s": round(float(update["time/update_s"]), 3), "iteration_s": round(wall, 3)}
        return steps * self.num_envs / wall

    def shutdown(self) -> None:
        self.turns.close()
        self.lock.close()
        self.workers.shutdown()


def _derived_mode(name: str, placement) -> str:
    """What ``Placement`` itself calls the run (its ``describe()``: mode, slots, pipeline stages), checked against
    the name the bench prints it under."""
    if not name.startswith(placement.mode.value):
        raise AssertionError(f"bench placement: run {name!r} is derived as {placement.describe()}")
    return placement.describe()


def _config(task: str, overrides: list[str], components: dict, stages: int, slots: int, inline: bool = False):
    config = load_train_config(task, None, [*overrides, f"env.pipeline_stages={stages}", f"placement.slots={slots}",
                                            f"rollout.inline={str(inline).lower()}"])
    config.placement.components = components
    validate(config)
    return config


def _policies(names: str) -> list[str]:
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in POLICIES]
    if unknown or not chosen:
        raise ConfigError(f"--policies={names!r}: allowed: a comma-separated list of {', '.join(POLICIES)}")
    return chosen


def _auto_mode(task: str, overrides: list[str], cluster, slots: int) -> tuple[tuple, str]:
    """``placement.auto``'s choice for these settings, profiled now (before any mode's workers start): the mode
    ``(components, stages, slots, inline)`` and its report."""
    from embodied_rl.runners.auto_placement import choose

    config = load_train_config(task, None, [*overrides, "placement.auto=true", f"placement.slots={slots}"])
    choice = choose(config, cluster)
    c = choice.candidate
    return (c.components, c.pipeline_stages, slots, c.inline), choice.report()


def run_placement_bench(task: str, env_workers: int, envs_per_worker: int, steps: int, repeats: int,
                        as_json: bool, policies: str = DEFAULT_POLICIES, full_loop: bool = False,
                        auto: bool = False) -> int:
    require_at_least_one(env_workers=env_workers, envs_per_worker=envs_per_worker, steps=steps, repeats=repeats)
    if envs_per_worker < 2:
        raise ConfigError("--envs-per-worker must be >= 2: the hybrid mode splits them into 2 pipeline stages")
    chosen = _policies(policies)
    if any("action_chunk=4" in o for p in chosen for o in POLICIES[p]) and steps % 4:
        raise ConfigError(f"--steps={steps}: the VLA policies act in chunks of 4 steps; allowed: a multiple of 4")
    base = [f"env.num_workers={env_workers}", f"env.envs_per_worker={envs_per_worker}", "rollout.num_workers=1"]
    if full_loop:  # the update trains on one measurement's samples
        base += [f"rollout.steps_per_iteration={steps}", *FULL_LOOP]
    presets = placement_modes(os.cpu_count() or 1)
    modes = {**presets, "auto": None} if auto else presets
    rates: dict = {policy: {mode: [] for mode in modes} for policy in chosen}
    shares: dict = {policy: {mode: [] for mode in modes} for policy in chosen}
    derived: dict = {policy: {} for policy in chosen}
    reports: dict = {}
    same: dict = {}  # policy -> the preset auto's choice equals (None: a placement of its own, measured as "auto")
    with Cluster(num_cpus=2) as cluster:
        for policy in chosen:
            measured = dict(presets)
            if auto:
                chosen_mode, reports[policy] = _auto_mode(task, [*base, *POLICIES[policy]], cluster,
                                                          presets["collocated"][2])
                # the choice measured as the preset it equals (the same processes on the same slots), else beside
                same[policy] = next((name for name, preset in presets.items()
                                     if (*preset, False) == chosen_mode), None)
                if same[policy] is None:
                    measured["auto"] = chosen_mode
            # All modes stay alive so they can be measured alternately; each holds a share of the CPU slots.
            configs = {mode: _config(task, [*base, *POLICIES[policy]], *measured[mode]) for mode in measured}
            if full_loop:
                loops = {mode: FullLoop(configs[mode], cluster, 1 / len(configs), f"bench-{policy}-{mode}")
                         for mode in configs}
            else:
                loops = {mode: RuntimeLoop(configs[mode], cluster, cluster_share=1 / len(configs)) for mode in configs}
            for mode, loop in loops.items():
                derived[policy][mode] = (_derived_mode(mode, loop.workers.placement) if mode != "auto" else
                                         f"{loop.workers.placement.describe()}"
                                         f"{'; inline policies' if loop.workers.inline else ''}")
                loop.measure(steps if full_loop else 4)
            for _ in range(repeats):
                for mode, loop in loops.items():
                    rates[policy][mode].append(loop.measure(steps))
                    shares[policy][mode].append(loop.last_breakdown)
            for loop in loops.values():
                loop.shutdown() if full_loop else loop.workers.shutdown()
    result: dict = {"task": task, "env_processes": env_workers, "envs_per_process": envs_per_worker,
                    "rollout_processes": 1, "steps_per_env": steps,
                    "measured": "full training iterations (sampling, PPO update, weight sync)" if full_loop
                    else "sampling only (env + rollout workers)", "policies": {}}
    for policy, by_mode in rates.items():
        by_mode = {mode: values for mode, values in by_mode.items() if values}  # auto, when it equals a preset
        median = {mode: round(float(np.median(values)), 1) for mode, values in by_mode.items()}
        split = next(mode for mode in modes if mode not in ("collocated", "hybrid_pipelined"))
        best_other = max(median["collocated"], median[split])
        result["policies"][policy] = {
            "env_steps_per_s": median,
            "env_steps_per_s_each_repeat": {mode: [round(v, 1) for v in values] for mode, values in by_mode.items()},
            f"hybrid_pipelined_over_{split}": round(median["hybrid_pipelined"] / median[split], 3),
            "hybrid_pipelined_over_best_other": round(median["hybrid_pipelined"] / best_other, 3),
            f"collocated_over_{split}": round(median["collocated"] / median[split], 3),
            "time_shares": {mode: {key: round(float(np.median([row[key] for row in rows])), 3) for key in rows[0]}
                            for mode, rows in shares[policy].items() if rows},
            "derived_modes": derived[policy],
        }
        if auto:
            best_preset = max(presets, key=lambda mode: median[mode])
            auto_rate = median[same[policy] or "auto"]
            result["policies"][policy].update({
                "auto_chose": same[policy] or "auto (a placement of its own, measured beside the presets)",
                "auto_over_best_preset": round(auto_rate / median[best_preset], 3),
                "best_preset": best_preset, "auto_report": reports[policy]})
    print(json.dumps(result) if as_json else json.dumps(result, indent=2))
    return 0
