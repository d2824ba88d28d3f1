"""PPO on simulator envs: sample through env and rollout workers, update on the actor, sync weights, repeat.

Sampling and updating are turns on the device slots (``runners/turns.py``): where they share slots, each phase
holds the device lock for its turn and the idle side is offloaded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import ray

from embodied_rl.config.loader import to_yaml
from embodied_rl.config.schema import TrainConfig
from embodied_rl.runners.setup import start_workers
from embodied_rl.runners.turns import PhaseTurns
from embodied_rl.runtime import Cluster
from embodied_rl.runtime.device_lock import DeviceLock
from embodied_rl.utils.checkpoint import Checkpoint, save_checkpoint
from embodied_rl.utils.metrics_log import MetricsLog
from embodied_rl.utils.progress import TrainingProgress


def episode_metrics(episodes: list[dict], prefix: str) -> dict:
    """Mean return, length, success_once and success_at_end over finished episodes, namespaced by ``prefix``."""
    if not episodes:
        return {}
    out = {f"{prefix}/episodes": len(episodes)}
    for key in ("episode_return", "episode_length", "success_once", "success_at_end"):
        out[f"{prefix}/{key}"] = float(np.mean([e[key] for e in episodes]))
    return out


class EmbodiedPPORunner:
    """Owns one training run in ``run_dir``: cluster, workers, logs and checkpoints."""

    def __init__(self, config: TrainConfig, run_dir: Path, resume: Checkpoint | None = None):
        self.config = config
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.iteration = 0
        self.env_steps = 0
        self.last_eval: dict = {}
        self.turns: list = []  # the device lock's TurnRecords of the last run: who held which slots when

    def steps_per_iteration(self) -> int:
        c = self.config
        return c.env.num_workers * c.env.envs_per_worker * c.rollout.steps_per_iteration

    def run(self) -> dict:
        c = self.config
        with Cluster(c.cluster.address, c.cluster.num_cpus) as cluster:
            if self.resume is not None:
                self.iteration = int(self.resume.counters.get("iteration", 0))
                self.env_steps = int(self.resume.counters.get("env_steps", 0))
            workers = start_workers(c, cluster, env_seed_offset=self.env_steps)
            lock = DeviceLock.create(cluster.session_id)
            turns = PhaseTurns(workers, lock, offload=c.placement.offload == "auto", weight_sync=c.rollout.weight_sync)
            print(f"{workers.placement.describe()}; {turns.describe()}", file=sys.stderr, flush=True)
            log = MetricsLog(self.run_dir)
            progress = TrainingProgress(c.total_env_steps, c.task)
            try:
                turns.start()
                with turns.training("setup"):
                    if self.resume is not None:
                        ray.get(workers.actor.call("load_training_state", self.resume.weights,
                                                   self.resume.trainer_state))
                    turns.publish_weights()
                self._loop(workers, turns, log, progress)
                turns.close()
            finally:
                self.turns = lock.turns()
                lock.close()
                progress.close()
                log.close()
                workers.shutdown()
        return self.last_eval

    def _loop(self, workers, turns: PhaseTurns, log: MetricsLog, progress: TrainingProgress) -> None:
        c = self.config
        start_steps, start_time = self.env_steps, time.perf_counter()
        while self.env_steps < c.total_env_steps:
            t0 = time.perf_counter()
            with turns.sampling("sample"):
                t_sample = time.perf_counter()
                episodes = workers.sample(c.rollout.steps_per_iteration)
                t1 = time.perf_counter()
            with turns.training("update"):
                t_update = time.perf_counter()
                metrics = ray.get(workers.actor.call("update", len(workers.env))[0])
                t2 = time.perf_counter()
                turns.publish_weights()
            t3 = time.perf_counter()
            self.iteration += 1
            self.env_steps += self.steps_per_iteration()
            metrics.update(episode_metrics(episodes, "train"))
            timings = turns.pop_timings()
            metrics.update(timings)
            metrics.update({"time/sample_s": t1 - t_sample, "time/update_wall_s": t2 - t_update,
                            "time/sync_s": timings.get("time/sync_install_s", 0.0)
                            + timings.get("time/sync_publish_s", 0.0) + timings.get("time/sync_broadcast_s", 0.0),
                            "time/turn_switch_s": (t3 - t0) - (t1 - t_sample) - (t2 - t_update),
                            "time/sample_steps_per_s": self.steps_per_iteration() / (t1 - t_sample),
                            "time/steps_per_s": (self.env_steps - start_steps) / (t3 - start_time),
                            "train/iteration": self.iteration, "time/elapsed_s": t3 - start_time})
            finished = self.env_steps >= c.total_env_steps
            if finished or (c.eval.every_iterations and self.iteration % c.eval.every_iterations == 0):
                t4 = time.perf_counter()
                with turns.sampling("evaluate"):
                    self.last_eval = episode_metrics(workers.evaluate(c.eval.num_episodes), "eval")
                self.last_eval["time/eval_s"] = time.perf_counter() - t4
                metrics.update(self.last_eval)
            if finished or self.iteration % c.log_every_iterations == 0:
                log.log(metrics, self.env_steps)
            if finished or (c.checkpoint.every_iterations and self.iteration % c.checkpoint.every_iterations == 0):
                with turns.training("checkpoint"):
                    self.save(workers)
            progress.update(self.env_steps, self.last_eval.get("eval/success_once"))

    def save(self, workers) -> Path:
        state = ray.get(workers.actor.call("training_state")[0])
        counters = {"iteration": self.iteration, "env_steps": self.env_steps, "policy_spec": workers.policy_spec,
                    "task": self.config.task}
        return save_checkpoint(self.run_dir / "checkpoints", self.iteration, state["weights"],
                               state["trainer_state"], counters, to_yaml(self.config),
                               self.config.checkpoint.keep_last)
