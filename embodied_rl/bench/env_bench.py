"""``embodied-rl bench env``: env-step throughput of the runtime loop vs the plain AsyncVectorEnv loop.

Runtime loop: env workers (Ray actors) -> channel -> rollout worker (batched policy inference) -> back, with
trajectories shipped to a reader as in training. Baselines: the task family's Gymnasium vector envs
(``sim_envs/families.py``) over the same number of envs, the same policy's inference in the driver, no Ray, no
channels: for ManiSkill what its CPU PPO does, ``AsyncVectorEnv`` with one env process each; for MetaWorld and
robosuite ``AsyncVectorEnv`` (the main baseline) and ``SyncVectorEnv`` (all envs in the driver). All are measured
alternately, ``repeats`` times each, in one process.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from embodied_rl.bench import print_report, require_at_least_one
from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.config.schema import TrainConfig


def _policy(obs_dim: int, action_dim: int, config: TrainConfig):
    from embodied_rl.models import build_policy

    return build_policy(config.policy.name, obs_dim, action_dim, hidden_sizes=list(config.policy.hidden_sizes))


def measure_baseline(config: TrainConfig, num_envs: int, steps: int, baseline: str = "async_vector_env") -> float:
    """Env steps/s of the task family's Gymnasium vector env ``baseline`` (``sim_envs/families.py``) + driver-side
    inference over ``steps`` steps of ``num_envs`` envs."""
    import sim_envs
    from embodied_rl.runners.setup import env_options
    from sim_envs.families import get_family

    entry = sim_envs.get_task(config.task)
    make = get_family(entry.simulator).reference_vector_env(baseline)
    vector_env = make(entry.env_id, num_envs, env_options(config))
    try:
        policy = _policy(vector_env.single_observation_space.shape[0], vector_env.single_action_space.shape[0],
                         config)
        obs, _ = vector_env.reset(seed=list(range(num_envs)))
        for _ in range(5):  # warm-up
            obs, *_ = vector_env.step(policy.act(torch.as_tensor(obs))[0].numpy())
        start = time.perf_counter()
        for _ in range(steps):
            actions = policy.act(torch.as_tensor(obs))[0]
            obs, *_ = vector_env.step(actions.numpy())
        return steps * num_envs / (time.perf_counter() - start)
    finally:
        vector_env.close()


def baselines_of(task: str) -> list[str]:
    """The Gymnasium vector envs ``task``'s family offers as baselines, the main one first."""
    import sim_envs
    from sim_envs.families import get_family

    try:
        entry = sim_envs.get_task(task)
        family = get_family(entry.simulator)
    except sim_envs.TaskConfigError as error:
        if "unknown task" in str(error):
            raise ConfigError(str(error)) from None
        family = None
    if family is None or not family.reference_vector_envs:
        raise ConfigError(f"--task {task} ({entry.simulator or 'no simulator'}) has no Gymnasium vector env to "
                          "measure against; allowed: a simulator task (maniskill_*, metaworld_*, robosuite_*)")
    return list(family.reference_vector_envs)


class RuntimeLoop:
    """Env and rollout worker groups on a local cluster, reused across measurements."""

    def __init__(self, config: TrainConfig, cluster, cluster_share: float = 1.0):
        from embodied_rl.runners.setup import start_workers

        from embodied_rl.workers.messages import TRAJECTORIES_KEY

        self.workers = start_workers(config, cluster, with_actor=False, cluster_share=cluster_share)
        self.workers.channel.subscribe(TRAJECTORIES_KEY)  # the driver reads trajectories, as the actor would
        self.num_envs = config.env.num_workers * config.env.envs_per_worker
        self.last_breakdown: dict = {}  # where the time of the last measurement went (see _time_shares)

    def measure(self, steps: int) -> float:
        from embodied_rl.workers.messages import TRAJECTORIES_KEY

        channel = self.workers.channel
        start = time.perf_counter()
        self.workers.sample(steps)
        received = 0
        while received < len(self.workers.env):  # trajectories go to a reader, as in training
            received += len(channel.get_batch(TRAJECTORIES_KEY))
        wall = time.perf_counter() - start
        self.last_breakdown = _time_shares(self.workers.last_env_seconds, self.workers.last_serving or [], wall)
        return steps * self.num_envs / wall


def _time_shares(env_seconds: list[dict], rollout_counters: list[dict], wall: float) -> dict:
    """Mean share of the wall time each env worker spent simulating / waiting for actions, and each rollout
    worker spent inferring / waiting for requests (the rest: recording trajectories, messages, scheduling)."""
    def share(rows: list[dict], key: str) -> float:
        return round(float(np.mean([row[key] for row in rows])) / wall, 3) if rows else 0.0

    return {"env_simulating": share(env_seconds, "simulating_s"),
            "env_waiting_for_actions": share(env_seconds, "waiting_for_actions_s"),
            "rollout_inferring": share(rollout_counters, "inferring_s"),
            "rollout_waiting_for_requests": share(rollout_counters, "waiting_s")}


def run_env_bench(task: str, env_workers: int, envs_per_worker: int, steps: int, repeats: int,
                  as_json: bool) -> int:
    from embodied_rl.runtime import Cluster

    require_at_least_one(env_workers=env_workers, envs_per_worker=envs_per_worker, steps=steps, repeats=repeats)
    baselines = baselines_of(task)
    config = load_train_config(task, None, [f"env.num_workers={env_workers}",
                                            f"env.envs_per_worker={envs_per_worker}"])
    from embodied_rl.commands.preflight import check_task_starts

    check_task_starts(config)
    num_envs = env_workers * envs_per_worker
    runtime_rates, baseline_rates = [], {name: [] for name in baselines}
    with Cluster(config.cluster.address, config.cluster.num_cpus) as cluster:
        loop = RuntimeLoop(config, cluster)
        loop.measure(10)  # warm-up: workers import, connect and fill caches
        for _ in range(repeats):
            runtime_rates.append(loop.measure(steps))
            for name in baselines:
                baseline_rates[name].append(measure_baseline(config, num_envs, steps, name))
    main = baselines[0]
    result = {
        "task": task, "env_processes": env_workers, "envs_per_process": envs_per_worker, "num_envs": num_envs,
        "steps_per_env": steps, "repeats": repeats,
        "runtime_env_steps_per_s": [round(r, 1) for r in runtime_rates],
        f"baseline_{main}_steps_per_s": [round(r, 1) for r in baseline_rates[main]],
        "runtime_median": round(float(np.median(runtime_rates)), 1),
        "baseline_median": round(float(np.median(baseline_rates[main])), 1),
    }
    result["ratio_runtime_over_baseline"] = round(result["runtime_median"] / result["baseline_median"], 3)
    for name in baselines[1:]:  # the family's other Gymnasium vector envs, measured in the same run
        median = round(float(np.median(baseline_rates[name])), 1)
        result[f"baseline_{name}_steps_per_s"] = [round(r, 1) for r in baseline_rates[name]]
        result[f"baseline_{name}_median"] = median
        result[f"ratio_runtime_over_{name}"] = round(result["runtime_median"] / median, 3)
    print_report(result, as_json)
    return 0
