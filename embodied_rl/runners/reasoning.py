"""Reasoning runs: a causal LM trained on a text task, on the same runtime as embodied runs (Ray workers, on an
embedded local Ray or, with ``cluster.address`` / ``--ray-address``, on an existing cluster).

A text env worker hands out prompts (``rl.prompts_per_iteration`` problems, each ``algorithm.group_size`` times)
and scores the responses with the task's verifier; generation workers sample the responses with their inference
copy of the model; the LM actor trains it, first by SFT on the train split (``sft.steps``), then by the chosen
algorithm of the GRPO family; after each update its weights go to the generation workers
(``generation.weight_sync``: by collective broadcast, or through the object store).
Held-out accuracy (greedy by default) is measured before training, after SFT and every ``eval.every_iterations``.

With ``rl.max_staleness=1`` (async rollout) the generation workers sample batch k+1 while the actor trains on
batch k: each batch is sampled by weights one update old, the update's ratio is taken against the actor's current
weights, and ``algorithm.tis_cap`` weights each token by min(p_actor / p_sampler, cap), as AReaL and SWIFT do.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import ray
import torch

import sim_envs
from embodied_rl.algorithms.filters import dynamic_sampling_mask
from embodied_rl.config.reasoning import ReasoningConfig, reasoning_yaml, text_placement
from embodied_rl.runners.text_workers import GenerationRound, TextWorkers
from embodied_rl.runners.weight_sync import get_failing_fast
from embodied_rl.runtime import Cluster, WorkerGroup
from embodied_rl.utils.checkpoint import Checkpoint, save_checkpoint
from embodied_rl.utils.metrics_log import MetricsLog
from embodied_rl.workers.generation_worker import GenerationWorker
from embodied_rl.workers.lm_actor_worker import LMActorWorker
from embodied_rl.workers.text_env_worker import TextEnvWorker

EVAL_SEED = 10_000_019
"""Seed of held-out generation (sampled only where ``generation.eval_temperature`` > 0)."""
MODEL_DIR = "model"
"""Where a finished run writes its model in the Hugging Face layout (``model.name=<run_dir>/model`` loads it)."""
class ReasoningRunner:
    def __init__(self, config: ReasoningConfig, run_dir: Path, resume: Checkpoint | None = None):
        """``resume``: a checkpoint of this run to continue from (``--resume``): RL goes on at its iteration with
        its weights, optimizer, KL reference, RNGs and prompt sampler; the start evaluation and SFT are not redone."""
        self.config = config
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.iteration = int(resume.counters["iteration"]) if resume else 0
        self.responses = int(resume.counters["env_steps"]) if resume else 0  # one response is one env step
        self.evaluations: dict[str, float] = dict(resume.counters.get("eval", {})) if resume else {}
        self.workers: TextWorkers | None = None

    def run(self) -> dict:
        c = self.config
        with Cluster(c.cluster.address, None):
            share = 0.2
            model = {"name": c.model.name, "seed": c.model.seed}
            placement, gpus = text_placement(c)

            def slots(component: str) -> dict:  # each worker's process pinned to its component's slots
                return {("gpu_slots" if gpus else "cpu_slots"): placement.slots[component]} if placement else {}

            env = self._env_group(share, slots("env"))
            generation = WorkerGroup(GenerationWorker, "generation", c.generation.num_workers, cpus_per_worker=share,
                                     start_timeout_s=c.fault.start_timeout_s, model=model,
                                     quantization=c.generation.quantization,
                                     engine=c.generation.engine, torch_threads=c.torch_threads, **slots("rollout"))
            parallel = rendezvous = None
            if c.trainer.backend != "single":
                from embodied_rl.engines.training.data_parallel import serve_rendezvous

                # Served by the driver, which outlives the trainer ranks (the store dies with this object); on a
                # joined cluster at the driver's node address, which ranks on other nodes can reach.
                host = ray.util.get_node_ip_address() if c.cluster.address else "127.0.0.1"
                rendezvous = serve_rendezvous(host, c.trainer.timeout_s)
                parallel = {"backend": c.trainer.backend, "master_address": host, "master_port": rendezvous.port,
                            "served_store": True, "timeout_s": c.trainer.timeout_s}
            actor = WorkerGroup(LMActorWorker, "lm-actor", c.trainer.world_size, cpus_per_worker=share, model=model,
                                algorithm=c.algorithm, seed=c.seed, data_parallel=parallel,
                                torch_threads=c.torch_threads, **slots("actor"))
            self.env, self.actor = env.workers[0], actor
            self.workers = TextWorkers(c, self.env, generation, actor)
            log = MetricsLog(self.run_dir, self.responses if self.resume else None)
            try:
                self.workers.form_weight_sync()
                if self.resume:
                    self._restore()
                self.workers.publish()
                if not self.resume:
                    self._log(log, self._evaluate("eval/start"))
                    if c.sft.steps:
                        self._sft(log)
                self._train(log)
                self._save(final=True)
            finally:
                log.close()
                for group in (env, generation, actor):
                    group.kill()
        return self.evaluations

    def _env_group(self, share: float, slots: dict) -> WorkerGroup:
        """The env worker's group (one worker): the train env and the held-out problems; ``slots``: its
        ``cpu_slots`` / ``gpu_slots``."""
        c = self.config
        group_size = c.algorithm.group_size
        return WorkerGroup(TextEnvWorker, "text-env", 1, cpus_per_worker=share, task=sim_envs.get_task(c.task),
                           options=dict(c.env), num_envs=c.rl.prompts_per_iteration * group_size,
                           group_size=group_size, seed=c.seed, **slots)

    def _actor(self, method: str, *args) -> list:
        """``method`` started on every trainer rank at once (data-parallel calls are collective); the futures,
        rank 0's first (the one that returns the whole batch's metrics and the whole model). Training calls
        take the trainer's turn on slots shared with generation first."""
        if method in ("sft_update", "sft_update_ids", "rl_update", "load_training_state"):
            self.workers.turn("training")
        return self.actor.call(method, *args)

    def _evaluate(self, prefix: str) -> dict:
        started = time.perf_counter()
        result = {k.replace("eval/", f"{prefix}/"): v for k, v in self._heldout_metrics().items()}
        result["time/eval_s"] = time.perf_counter() - started
        self.evaluations.update({k: v for k, v in result.items() if k.startswith("eval")})
        print(f"{prefix}: held-out accuracy {result[f'{prefix}/heldout_accuracy']:.3f} on "
              f"{int(result[f'{prefix}/problems'])} problems", file=sys.stderr, flush=True)
        return result

    def _heldout_metrics(self) -> dict:
        """One held-out evaluation's metrics (``eval/heldout_accuracy``, ``eval/problems``, ...)."""
        c = self.config
        questions = self.workers.call_env("heldout_questions", c.eval.num_problems)
        answers = self.workers.generate(questions, c.generation.eval_temperature, seed=EVAL_SEED)
        return self.workers.call_env("score_heldout", [a["text"] for a in answers])

    def _sft(self, log: MetricsLog) -> None:
        metrics = self._sft_update()
        metrics["time/weight_sync_s"] = self.workers.publish()
        metrics.update(self._evaluate("eval/sft"))
        self._log(log, metrics)

    def _sft_update(self) -> dict:
        """The SFT warm start on the actor (rank 0's metrics): next-token loss on the train split's answers."""
        c = self.config.sft
        examples = self.workers.call_env("sft_examples")
        return get_failing_fast(self._actor("sft_update", examples, c.steps, c.batch_size, c.lr),
                                self.config.fault.update_timeout_s, "the SFT warm start (fault.update_timeout_s)")[0]

    def _start_batch(self, sampling_round: int = 0) -> GenerationRound:
        """Generation of the env's current prompts, started."""
        c = self.config
        questions = self.workers.call_env("prompts")
        seed = c.seed * 100_003 + self.iteration + 7_919 * sampling_round
        return self.workers.start_generation(questions, c.generation.temperature, seed=seed)

    def _train(self, log: MetricsLog) -> None:
        """``rl.iterations`` updates. Synchronous: sample, score, update, publish. Async (``rl.max_staleness=1``):
        the next batch's generation is started before the update on this one and runs beside it; the new weights
        reach each generation worker after its current batch (Ray runs an actor's calls in order)."""
        c = self.config
        overlap = c.rl.max_staleness > 0
        start = time.perf_counter()
        pending = self._start_batch() if self.iteration < c.rl.iterations else None
        for k in range(self.iteration, c.rl.iterations):
            step_start = time.perf_counter()
            answers, scores, metrics = self._collect(pending)
            metrics["time/generate_wait_s"] = metrics.pop("wait_s")
            metrics.update(self.workers.apply_scale_request(self.run_dir))  # nothing is generating here, in either mode
            batch = self._trainer_batch(answers, scores)
            r = c.rl
            trained_version = self.workers.published_version  # the actor's weights as this update starts
            update_start = time.time()
            update = self._actor("rl_update", batch, r.lr, c.generation.temperature, r.update_rounds,
                                 r.num_minibatches, r.max_grad_norm)
            last = k + 1 == c.rl.iterations
            self.iteration += 1
            if overlap and not last:
                pending = self._start_batch()
            metrics.update(get_failing_fast(update, c.fault.update_timeout_s, "the trainer's update "
                                            "(fault.update_timeout_s)")[0])
            update_end = time.time()
            metrics["time/weight_sync_s"] = self.workers.publish()
            if overlap and not last:  # how long the next batch's generation ran beside this update
                metrics["time/overlap_s"] = self.workers.overlap_s(pending, update_start, update_end)
            if not overlap and not last:
                pending = self._start_batch()
                metrics["time/overlap_s"] = 0.0
            metrics.update(self.workers.faults)
            if self.workers.offload_turns:
                metrics["time/turn_switch_s"] = self.workers.pop_turn_seconds()
            metrics.update({"train/iteration": self.iteration,
                            "train/policy_staleness": trained_version - min(a["policy_version"] for a in answers),
                            "time/iteration_s": time.perf_counter() - step_start,
                            "time/elapsed_s": time.perf_counter() - start})
            if last or (c.eval.every_iterations and self.iteration % c.eval.every_iterations == 0):
                metrics.update(self._evaluate("eval"))
            self._log(log, metrics)
            every = c.checkpoint.every_iterations
            if every and self.iteration % every == 0 and not last:
                self._save(final=False)

    def _trainer_batch(self, answers: list[dict], scores: list[float]) -> dict:
        """The actor's ``rl_update`` batch from ``_collect``'s answers and scores."""
        return {"prompt_ids": [a["prompt_ids"] for a in answers], "token_ids": [a["token_ids"] for a in answers],
                "logprobs": [a["logprobs"] for a in answers], "scores": scores}

    def _collect(self, pending: GenerationRound) -> tuple[list[dict], list[float], dict]:
        """The answers to one batch of prompts (``pending``'s) with their scores, and the sampling metrics.

        With dynamic sampling and ``algorithm.max_sampling_rounds`` > 1 (DAPO's resample-to-fill), groups whose G
        responses all scored the same are dropped and further prompts are sampled, up to that many rounds, until
        ``rl.prompts_per_iteration`` informative groups are in hand; the batch is then those groups (fewer if the
        rounds ran out)."""
        c = self.config
        G, wanted = c.algorithm.group_size, c.rl.prompts_per_iteration
        fill = c.algorithm.max_sampling_rounds > 1
        kept_answers, kept_scores, every_score = [], [], {"rewards": [], "outcome": [], "format": []}
        generate_s = wait_s = 0.0
        tokens = rounds = 0
        while True:
            waiting = time.perf_counter()
            answers = self.workers.finish_generation(pending)
            wait_s += time.perf_counter() - waiting
            rounds += 1
            scored = self.workers.call_env("score", [a["text"] for a in answers])  # also draws the next prompts
            self.responses += len(answers)
            tokens += sum(len(a["token_ids"]) for a in answers)
            generate_s += max(a["generate_s"] for a in answers)
            for key in every_score:
                every_score[key].extend(scored[key])
            rewards = np.asarray(scored["rewards"], dtype=float).reshape(-1, G)
            informative = dynamic_sampling_mask(torch.as_tensor(rewards.reshape(-1)), G)[::G].tolist()
            for g in range(len(rewards)):
                if not fill or informative[g]:
                    kept_answers.extend(answers[g * G:(g + 1) * G])
                    kept_scores.extend(rewards[g].tolist())
            if not fill or len(kept_scores) >= wanted * G or rounds >= c.algorithm.max_sampling_rounds:
                break
            pending = self._start_batch(rounds)
        groups = min(len(kept_scores) // G, wanted)  # informative ones, when filling
        if fill and not kept_scores:  # nothing informative in any round: the last round, which the mask drops
            kept_answers, kept_scores = answers, rewards.reshape(-1).tolist()
        metrics = {"train/reward": float(np.mean(every_score["rewards"])),
                   "reward/outcome": float(np.mean(every_score["outcome"])),
                   "reward/format": float(np.mean(every_score["format"])),
                   "train/sampling_rounds": rounds, "train/batch_groups": groups,
                   "time/generate_s": generate_s, "time/generated_tokens_per_s": tokens / generate_s,
                   "wait_s": wait_s}
        return kept_answers[:wanted * G], kept_scores[:wanted * G], metrics

    def _log(self, log: MetricsLog, metrics: dict) -> None:
        metrics.setdefault("train/iteration", self.iteration)
        log.log(metrics, self.responses)

    def _save(self, final: bool) -> None:
        """A checkpoint of the run at ``self.iteration`` (in async mode the next batch, already generating, is
        not part of it: a resumed run samples that batch anew); ``final``: also the model in the Hugging Face
        layout."""
        state = get_failing_fast(self._actor("training_state"), self.config.fault.hang_timeout_s,
                                 "the trainer's state")[0]
        counters = {"iteration": self.iteration, "env_steps": self.responses, "task": self.config.task,
                    "eval": self.evaluations}
        save_checkpoint(self.run_dir / "checkpoints", self.iteration, state["weights"], state["trainer_state"],
                        counters, reasoning_yaml(self.config), keep_last=self.config.checkpoint.keep_last,
                        env_state=self._env_state())
        if final:
            get_failing_fast(self._actor("save_pretrained", str(self.run_dir / MODEL_DIR)),
                             self.config.fault.hang_timeout_s, "the trainer saving the model")

    def _env_state(self) -> list | None:
        """The train env's prompt sampler (``TextEnvWorker.state``), saved with a checkpoint."""
        return [self.workers.call_env("state")]

    def _restore(self) -> None:
        """Load ``self.resume`` into the trainer ranks (all at once) and the env worker."""
        checkpoint = self.resume
        get_failing_fast(self._actor("load_training_state", checkpoint.weights, checkpoint.trainer_state),
                         self.config.fault.hang_timeout_s, "the trainer loading the checkpoint")
        if checkpoint.env_state:
            self.workers.call_env("restore", checkpoint.env_state[0])
        print(f"resumed from {checkpoint.path} at RL iteration {self.iteration}", file=sys.stderr, flush=True)
