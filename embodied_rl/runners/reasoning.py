"""Reasoning runs: a causal LM trained on a text task, on the same runtime as embodied runs (Ray workers, on the
embedded local Ray for now).

A text env worker hands out prompts (``rl.prompts_per_iteration`` problems, each ``algorithm.group_size`` times)
and scores the responses with the task's verifier; generation workers sample the responses with their inference
copy of the model; the LM actor trains it, first by SFT on the train split (``sft.steps``), then by the chosen
algorithm of the GRPO family; after each update its weights go to the generation workers through the object store.
Held-out accuracy (greedy by default) is measured before training, after SFT and every ``eval.every_iterations``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import ray

import sim_envs
from embodied_rl.config.reasoning import ReasoningConfig, reasoning_yaml
from embodied_rl.runtime import Cluster, WorkerGroup
from embodied_rl.utils.checkpoint import save_checkpoint
from embodied_rl.utils.metrics_log import MetricsLog
from embodied_rl.workers.generation_worker import GenerationWorker
from embodied_rl.workers.lm_actor_worker import LMActorWorker
from embodied_rl.workers.text_env_worker import TextEnvWorker

MODEL_DIR = "model"
"""Where a finished run writes its model in the Hugging Face layout (``model.name=<run_dir>/model`` loads it)."""


class ReasoningRunner:
    def __init__(self, config: ReasoningConfig, run_dir: Path):
        self.config = config
        self.run_dir = Path(run_dir)
        self.iteration = 0
        self.responses = 0  # env steps of a text task: one response is one step
        self.evaluations: dict[str, float] = {}

    def run(self) -> dict:
        c = self.config
        with Cluster(None, None):
            share = 0.2
            model = {"name": c.model.name, "seed": c.model.seed}
            group_size = c.algorithm.group_size
            env = WorkerGroup(TextEnvWorker, "text-env", 1, cpus_per_worker=share, task=sim_envs.get_task(c.task),
                              options=dict(c.env), num_envs=c.rl.prompts_per_iteration * group_size,
                              group_size=group_size, seed=c.seed)
            generation = WorkerGroup(GenerationWorker, "generation", c.generation.num_workers, cpus_per_worker=share,
                                     model=model, torch_threads=c.torch_threads)
            actor = WorkerGroup(LMActorWorker, "lm-actor", 1, cpus_per_worker=share, model=model,
                                algorithm=c.algorithm, seed=c.seed, torch_threads=c.torch_threads)
            self.env, self.generation, self.actor = env.workers[0], generation, actor.workers[0]
            log = MetricsLog(self.run_dir, None)
            try:
                self._publish()
                self._log(log, self._evaluate("eval/start"))
                if c.sft.steps:
                    self._sft(log)
                start = time.perf_counter()
                for _ in range(c.rl.iterations):
                    metrics = self._rl_iteration()
                    metrics["time/elapsed_s"] = time.perf_counter() - start
                    final = self.iteration == c.rl.iterations
                    if final or (c.eval.every_iterations and self.iteration % c.eval.every_iterations == 0):
                        metrics.update(self._evaluate("eval"))
                    self._log(log, metrics)
                self._save()
            finally:
                log.close()
                for group in (env, generation, actor):
                    group.kill()
        return self.evaluations

    def _publish(self) -> None:
        weights = self.actor.get_weights.remote()
        ray.get([worker.load_weights.remote(weights) for worker in self.generation.workers])

    def _generate(self, questions: list[str], temperature: float, seed: int) -> list[dict]:
        """Split ``questions`` over the generation workers (contiguous parts, so groups stay together mostly)."""
        c = self.config.generation
        parts = np.array_split(np.arange(len(questions)), len(self.generation.workers))
        futures = [worker.generate.remote([questions[i] for i in part],
                                          dict(max_new_tokens=c.max_new_tokens, temperature=temperature,
                                               seed=seed * 1009 + rank))
                   for rank, (worker, part) in enumerate(zip(self.generation.workers, parts)) if len(part)]
        return [answer for answers in ray.get(futures) for answer in answers]

    def _evaluate(self, prefix: str) -> dict:
        c = self.config
        questions = ray.get(self.env.heldout_questions.remote(c.eval.num_problems))
        started = time.perf_counter()
        answers = self._generate(questions, c.generation.eval_temperature, seed=10_000_019)
        result = ray.get(self.env.score_heldout.remote([a["text"] for a in answers]))
        result = {k.replace("eval/", f"{prefix}/"): v for k, v in result.items()}
        result["time/eval_s"] = time.perf_counter() - started
        self.evaluations.update({k: v for k, v in result.items() if k.startswith("eval")})
        print(f"{prefix}: held-out accuracy {result[f'{prefix}/heldout_accuracy']:.3f} on "
              f"{int(result[f'{prefix}/problems'])} problems", file=sys.stderr, flush=True)
        return result

    def _sft(self, log: MetricsLog) -> None:
        c = self.config.sft
        examples = ray.get(self.env.sft_examples.remote())
        metrics = ray.get(self.actor.sft_update.remote(examples, c.steps, c.batch_size, c.lr))
        self._publish()
        metrics.update(self._evaluate("eval/sft"))
        self._log(log, metrics)

    def _rl_iteration(self) -> dict:
        c = self.config
        questions = ray.get(self.env.prompts.remote())
        started = time.perf_counter()
        answers = self._generate(questions, c.generation.temperature, seed=c.seed * 100_003 + self.iteration)
        generate_s = time.perf_counter() - started
        scored = ray.get(self.env.score.remote([a["text"] for a in answers]))
        batch = {"prompt_ids": [a["prompt_ids"] for a in answers], "token_ids": [a["token_ids"] for a in answers],
                 "logprobs": [a["logprobs"] for a in answers], "scores": scored["rewards"]}
        r = c.rl
        metrics = ray.get(self.actor.rl_update.remote(batch, r.lr, c.generation.temperature, r.update_rounds,
                                                      r.num_minibatches, r.max_grad_norm))
        self._publish()
        self.iteration += 1
        self.responses += len(answers)
        tokens = sum(len(a["token_ids"]) for a in answers)
        metrics.update({"train/iteration": self.iteration, "train/reward": float(np.mean(scored["rewards"])),
                        "reward/outcome": float(np.mean(scored["outcome"])),
                        "reward/format": float(np.mean(scored["format"])),
                        "time/generate_s": generate_s, "time/generated_tokens_per_s": tokens / generate_s})
        return metrics

    def _log(self, log: MetricsLog, metrics: dict) -> None:
        metrics.setdefault("train/iteration", self.iteration)
        log.log(metrics, self.responses)

    def _save(self) -> None:
        state = ray.get(self.actor.training_state.remote())
        counters = {"iteration": self.iteration, "env_steps": self.responses, "task": self.config.task,
                    "eval": self.evaluations}
        save_checkpoint(self.run_dir / "checkpoints", self.iteration, state["weights"], state["trainer_state"],
                        counters, reasoning_yaml(self.config), keep_last=3)
        ray.get(self.actor.save_pretrained.remote(str(self.run_dir / MODEL_DIR)))
