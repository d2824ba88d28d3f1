"""PPO on simulator envs: sample through env and rollout workers, update on the actor, sync weights, repeat."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import ray

from embodied_rl.config.loader import to_yaml
from embodied_rl.config.schema import TrainConfig
from embodied_rl.runners.setup import start_workers
from embodied_rl.runtime import Cluster
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
            print(workers.placement.describe(), file=sys.stderr, flush=True)
            if self.resume is not None:
                ray.get(workers.actor.call("load_training_state", self.resume.weights, self.resume.trainer_state))
            workers.sync_weights()
            log = MetricsLog(self.run_dir)
            progress = TrainingProgress(c.total_env_steps, c.task)
            try:
                self._loop(workers, log, progress)
            finally:
                progress.close()
                log.close()
                workers.shutdown()
        return self.last_eval

    def _loop(self, workers, log: MetricsLog, progress: TrainingProgress) -> None:
        c = self.config
        start_steps, start_time = self.env_steps, time.perf_counter()
        while self.env_steps < c.total_env_steps:
            t0 = time.perf_counter()
            episodes = workers.sample(c.rollout.steps_per_iteration)
            t1 = time.perf_counter()
            metrics = ray.get(workers.actor.call("update", len(workers.env))[0])
            t2 = time.perf_counter()
            workers.sync_weights()
            t3 = time.perf_counter()
            self.iteration += 1
            self.env_steps += self.steps_per_iteration()
            metrics.update(episode_metrics(episodes, "train"))
            metrics.update({"time/sample_s": t1 - t0, "time/update_wall_s": t2 - t1, "time/sync_s": t3 - t2,
                            "time/sample_steps_per_s": self.steps_per_iteration() / (t1 - t0),
                            "time/steps_per_s": (self.env_steps - start_steps) / (t3 - start_time),
                            "train/iteration": self.iteration, "time/elapsed_s": t3 - start_time})
            finished = self.env_steps >= c.total_env_steps
            if finished or (c.eval.every_iterations and self.iteration % c.eval.every_iterations == 0):
                t4 = time.perf_counter()
                self.last_eval = episode_metrics(workers.evaluate(c.eval.num_episodes), "eval")
                self.last_eval["time/eval_s"] = time.perf_counter() - t4
                metrics.update(self.last_eval)
            if finished or self.iteration % c.log_every_iterations == 0:
                log.log(metrics, self.env_steps)
            if finished or (c.checkpoint.every_iterations and self.iteration % c.checkpoint.every_iterations == 0):
                self.save(workers)
            progress.update(self.env_steps, self.last_eval.get("eval/success_once"))

    def save(self, workers) -> Path:
        state = ray.get(workers.actor.call("training_state")[0])
        counters = {"iteration": self.iteration, "env_steps": self.env_steps, "policy_spec": workers.policy_spec,
                    "task": self.config.task}
        return save_checkpoint(self.run_dir / "checkpoints", self.iteration, state["weights"],
                               state["trainer_state"], counters, to_yaml(self.config),
                               self.config.checkpoint.keep_last)
