"""Reasoning runs: a causal LM trained on a text task, on the same runtime as embodied runs (Ray workers, on an
embedded local Ray or, with ``cluster.address`` / ``--ray-address``, on an existing cluster).

A text env worker hands out prompts (``rl.prompts_per_iteration`` problems, each ``algorithm.group_size`` times)
and scores the responses with the task's verifier; generation workers sample the responses with their inference
copy of the model; the LM actor trains it, first by SFT on the train split (``sft.steps``), then by the chosen
algorithm of the GRPO family; after each update its weights go to the generation workers
(``rollout.weight_sync``: by collective broadcast, or through the object store).
Held-out accuracy (greedy by default) is measured before training, after SFT and every ``eval.every_iterations``.

With ``rollout.max_staleness=1`` (async rollout) the generation workers sample batch k+1 while the actor trains on
batch k: each batch is sampled by weights one update old, the update's ratio is taken against the actor's current
weights, and ``algorithm.tis_cap`` weights each token by min(p_actor / p_sampler, cap), as AReaL and SWIFT do.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import ray

import sim_envs
from embodied_rl.config.reasoning import (ReasoningConfig, actor_memory, engine_options, reasoning_yaml,
                                          rl_learning_rate, text_placement)
from embodied_rl.runners.heldout_metrics import greedy_summary, sampled_summary
from embodied_rl.runners.loop import Round, Schedule, TrainingLoop
from embodied_rl.runners.setup import node_ids_for
from embodied_rl.runners.text_checkpoints import TextCheckpoints
from embodied_rl.runners.text_workers import GenerationRound, TextWorkers
from embodied_rl.runners.weight_sync import get_failing_fast
from embodied_rl.runtime import Channel, Cluster, DeviceLock, WorkerGroup
from embodied_rl.utils.atomic import write_text_atomic
from embodied_rl.utils.checkpoint import Checkpoint
from embodied_rl.utils.metrics_log import MetricsLog
from embodied_rl.workers.generation_worker import GenerationWorker
from embodied_rl.workers.lm_actor_worker import LMActorWorker
from embodied_rl.workers.text_env_worker import TextEnvWorker

EVAL_SEED = 10_000_019
"""Seed of held-out generation (sampled only where ``rollout.eval_temperature`` > 0)."""
MODEL_DIR = "model"
"""Where a finished run writes its model in the Hugging Face layout (``model.name=<run_dir>/model`` loads it)."""
class ReasoningRunner(TextCheckpoints):
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
        self.summary: dict = {}  # the finished run's summary (summary.json)
        self.round_ids = itertools.count()  # numbers the sampling rounds sent to the trainer on the channel
        self.turns: list = []  # the device lock's TurnRecords of the run, where generation and training took turns

    def run(self) -> dict:
        """Evaluate, SFT, then RL to ``rl.iterations``; the evaluations (``self.summary``: the run's summary)."""
        c = self.config
        started = time.perf_counter()
        with Cluster(c.cluster.address, c.cluster.num_cpus) as cluster:
            share = 0.2
            # sampled rounds reach the trainer on a channel: the driver sees their text and scores, never their ids
            self.channel = Channel.create("text", cluster)
            model = {"name": c.model.name, "seed": c.model.seed, "prompt_format": c.model.prompt_format,
                     "prompt_template": c.model.prompt_template}
            placement, gpus = text_placement(c)

            def slots(component: str) -> dict:  # each worker's process pinned to its component's slots and nodes
                pinned = {"node_ids": node_ids_for(c, component)}
                if placement:
                    pinned["gpu_slots" if gpus else "cpu_slots"] = placement.slots[component]
                return pinned

            env = self._env_group(share, slots("env"))
            generation = WorkerGroup(GenerationWorker, "generation", c.rollout.num_workers, cpus_per_worker=share,
                                     start_timeout_s=c.fault.start_timeout_s, model=model,
                                     quantization=c.rollout.quantization, engine=c.rollout.engine,
                                     engine_options=engine_options(c), torch_threads=c.torch_threads,
                                     channel=self.channel, put_timeout_s=c.fault.hang_timeout_s,
                                     **slots("rollout"))
            parallel = rendezvous = None
            if c.actor.backend != "single":
                from embodied_rl.engines.training.data_parallel import serve_rendezvous

                # Served by the driver, which outlives the trainer ranks (the store dies with this object); on a
                # joined cluster at the driver's node address, which ranks on other nodes can reach.
                host = ray.util.get_node_ip_address() if c.cluster.address else "127.0.0.1"
                rendezvous = serve_rendezvous(host, c.actor.timeout_s)
                parallel = {"backend": c.actor.backend, "master_address": host, "master_port": rendezvous.port,
                            "served_store": True, "timeout_s": c.actor.timeout_s}
                if c.actor.backend == "megatron":
                    parallel["tensor_parallel_size"] = c.actor.tensor_parallel_size
            actor = WorkerGroup(LMActorWorker, "lm-actor", c.actor.world_size, cpus_per_worker=share, model=model,
                                algorithm=c.algorithm, seed=c.seed, data_parallel=parallel,
                                lora={"rank": c.actor.lora_rank, "alpha": c.actor.lora_alpha},
                                memory=actor_memory(c.actor), channel=self.channel,
                                round_timeout_s=c.fault.hang_timeout_s, torch_threads=c.torch_threads,
                                **slots("actor"))
            self.env, self.actor = env.workers[0], actor
            lock = DeviceLock.create(cluster.session_id) if placement is not None else None
            self.workers = TextWorkers(c, self.env, generation, actor, env_group=self._replaceable_env(env),
                                       lock=lock, slots=placement.slots if placement is not None else None)
            log = MetricsLog(self.run_dir, self.responses if self.resume else None, c.logging, reasoning_yaml(c))
            ended = "failed"
            try:
                self.workers.form_weight_sync()
                if self.resume:
                    self._restore()
                self.workers.publish()
                if not self.resume:
                    self._log(log, self._evaluate("eval/start"))
                    if c.sft.steps:
                        self._sft(log)
                self.log, done = log, self.iteration
                try:
                    TrainingLoop(self, Schedule(c.eval.every_iterations, c.checkpoint.every_iterations)).run()
                except KeyboardInterrupt:  # Ctrl-C or SIGTERM (cluster.install_interrupt_handler)
                    self._stop_checkpoint(None)
                    raise
                except Exception as error:  # a failure on the driver's side with the trainer perhaps alive
                    self._stop_checkpoint(error)
                    raise
                if self.iteration == done:  # no RL iteration left (rl.iterations=0): the model as SFT left it
                    self._save(final=True)
                self.summary = {"run_dir": str(self.run_dir), "iterations": self.iteration,
                                "responses": self.responses, "wall_s": round(time.perf_counter() - started, 1),
                                **self.evaluations}
                ended = "finished"
            except KeyboardInterrupt:
                ended = "killed"
                raise
            finally:
                log.close(self.summary if ended == "finished" else None, ended)
                self._close_turns(lock)
                for group in (env, generation, actor):
                    group.kill()
        return self.evaluations

    def _close_turns(self, lock: DeviceLock | None) -> None:
        """Release the device lock, keep its record (``self.turns``: who held which slots when) and stop it."""
        if lock is None:
            return
        try:
            self.workers.end_turns()
            self.turns = lock.turns()
        except Exception:  # the lock's actor died (its records with it): the run's own error says more
            pass
        lock.close()

    def _env_group(self, share: float, slots: dict) -> WorkerGroup:
        """The env worker's group (one worker): the train env and the held-out problems; ``slots``: its
        ``cpu_slots`` / ``gpu_slots``."""
        c = self.config
        group_size = c.algorithm.group_size
        return WorkerGroup(TextEnvWorker, "text-env", 1, cpus_per_worker=share, task=sim_envs.get_task(c.task),
                           options=dict(c.env), num_envs=c.rl.prompts_per_iteration * group_size,
                           group_size=group_size, seed=c.seed, **slots)

    def _replaceable_env(self, env: WorkerGroup) -> WorkerGroup | None:
        """The env group whose dead worker ``TextWorkers`` replaces (single-turn tasks: their sampler's state is
        all there is to restore)."""
        return env

    def _actor(self, method: str, *args) -> list:
        """``method`` started on every trainer rank at once (data-parallel calls are collective); the futures,
        rank 0's first (the one that returns the whole batch's metrics and the whole model). Training calls
        take the trainer's turn on slots shared with generation first."""
        if method in ("sft_update", "sft_update_ids", "rl_update_round", "load_training_state"):
            self.workers.turn("training")
        return self.actor.call(method, *args)

    def _evaluate(self, prefix: str) -> dict:
        started = time.perf_counter()
        self._evaluation_name = f"{prefix.replace('/', '_')}_iter{self.iteration:06d}"
        result = {k.replace("eval/", f"{prefix}/"): v for k, v in self._heldout_metrics().items()}
        result["time/eval_s"] = time.perf_counter() - started
        self.evaluations.update({k: v for k, v in result.items() if k.startswith("eval")})
        print(f"{prefix}: held-out accuracy {result[f'{prefix}/heldout_accuracy']:.3f} on "
              f"{int(result[f'{prefix}/problems'])} problems", file=sys.stderr, flush=True)
        return result

    def _heldout_metrics(self) -> dict:
        """One held-out evaluation's metrics (``eval/heldout_accuracy``, ``eval/problems``, truncation and lengths;
        with ``eval.samples_per_problem`` k also pass@k, mean@k, maj@k) and its sample dump."""
        c = self.config
        questions = self.workers.call_env("heldout_questions", c.eval.num_problems)
        ids = list(range(len(questions)))
        answers = self.workers.generate(questions, c.rollout.eval_temperature, seed=EVAL_SEED)
        rows = self.workers.call_env("score_heldout", [a["text"] for a in answers], ids)
        metrics = greedy_summary(rows, answers)
        k = c.eval.samples_per_problem
        if k:
            sampled = self.workers.generate([q for q in questions for _ in range(k)], c.eval.sample_temperature,
                                            seed=EVAL_SEED + 1)
            scored = self.workers.call_env("score_heldout", [a["text"] for a in sampled], [i for i in ids
                                                                                          for _ in range(k)])
            metrics.update(sampled_summary(scored, k))
        self._dump_samples(questions, answers, rows)
        return metrics

    def _dump_samples(self, questions: list[str], answers: list[dict], rows: dict) -> None:
        """The first ``eval.dump_samples`` held-out problems of this evaluation, one JSON line each (question,
        response, extracted answer, correct, formatted, finished, tokens), in ``samples/<evaluation>.jsonl``."""
        count = min(self.config.eval.dump_samples, len(answers))
        if not count:
            return
        lines = [json.dumps({"question": questions[i], "response": answers[i]["text"],
                             "extracted": rows["extracted"][i], "correct": bool(rows["correct"][i]),
                             "formatted": bool(rows["formatted"][i]), "finished": bool(answers[i]["finished"]),
                             "tokens": len(answers[i]["token_ids"]), "policy_version": answers[i]["policy_version"]})
                 for i in range(count)]
        directory = self.run_dir / "samples"
        directory.mkdir(parents=True, exist_ok=True)
        write_text_atomic(directory / f"{self._evaluation_name}.jsonl", "\n".join(lines) + "\n")

    def _sft(self, log: MetricsLog) -> None:
        metrics = self._sft_update()
        started = time.perf_counter()
        self.workers.publish()
        metrics["time/sync_s"] = time.perf_counter() - started  # the loop's name for a sync's seconds
        metrics.update(self._evaluate("eval/sft"))
        self._log(log, metrics)

    def _sft_update(self) -> dict:
        """The SFT warm start on the actor (rank 0's metrics): next-token loss on the train split's answers."""
        c = self.config.sft
        examples = self.workers.call_env("sft_examples")
        return get_failing_fast(self._actor("sft_update", examples, c.steps, c.batch_size, c.lr),
                                self.config.fault.update_timeout_s, "the SFT warm start (fault.update_timeout_s)")[0]

    # The training loop's side (runners/loop.py): how a text run samples, updates, syncs and reports.

    samples = True
    best_score = None  # held-out accuracy is logged, not ranked: the final model is the run's

    @property
    def overlap(self) -> bool:
        return self.config.rollout.max_staleness > 0

    def ends(self, iteration: int) -> bool:
        return iteration >= self.config.rl.iterations

    def can_sample_more(self) -> bool:
        return True  # resample-to-fill is bounded by algorithm.max_sampling_rounds (start_update)

    def begin_iteration(self) -> dict:
        # the run as this iteration starts, for a stop checkpoint written before its update begins
        self._boundary = {"iteration": self.iteration, "responses": self.responses, "env_state": self._env_state(),
                          "update": None}
        self._rounds = 0
        self._scored: dict[str, list] = {"rewards": [], "outcome": [], "format": []}
        self._generated = {"tokens": 0, "generate_s": 0.0}
        return self.workers.apply_scale_request(self.run_dir)  # nothing is generating here, in either mode

    def start_sampling(self, iteration: int, sampling_round: int) -> GenerationRound:
        """Generation of the env's current prompts, started (seeded by the iteration and the round)."""
        c = self.config
        questions = self.workers.call_env("prompts")
        seed = c.seed * 100_003 + iteration + 7_919 * sampling_round
        return self.workers.start_generation(questions, c.rollout.temperature, seed=seed,
                                             method="generate_into_channel", round_id=next(self.round_ids))

    def finish_sampling(self, pending: GenerationRound) -> Round:
        answers = self.workers.finish_generation(pending)
        return Round(answers, min(a["generate_started"] for a in answers), max(a["generate_ended"] for a in answers),
                     {"generate_s": max(a["generate_s"] for a in answers),
                      "tokens": sum(a["response_tokens"] for a in answers)}, sent=(pending.round_id, pending.sent()))

    def training_turn(self, holder: str):
        return contextlib.nullcontext()  # training calls take the trainer's turn themselves (_actor)

    def start_update(self, sampled: Round):
        """Score the round and hand its scores to the trainer, which takes the round's responses off the channel,
        keeps its groups and updates (``LMActorWorker.rl_update_round``). With dynamic sampling's
        ``algorithm.max_sampling_rounds`` > 1 (DAPO's resample-to-fill) the trainer keeps only groups whose G
        responses did not all score the same and asks for further rounds (``train/needs_more``), up to that many,
        until ``rl.prompts_per_iteration`` informative groups are in hand (fewer if the rounds ran out)."""
        c = self.config
        scores = self._score(sampled)
        self._rounds += 1
        self._generated["tokens"] += sampled.metrics["tokens"]
        self._generated["generate_s"] += sampled.metrics["generate_s"]
        fill = c.algorithm.max_sampling_rounds > 1
        selection = {"first": self._rounds == 1, "fill": fill, "wanted": c.rl.prompts_per_iteration,
                     "last": not fill or self._rounds >= c.algorithm.max_sampling_rounds}
        self._trained_version = self.workers.published_version  # the actor's weights as this update starts
        r = c.rl
        lr = self._learning_rate = rl_learning_rate(r, self.iteration + 1)
        round_id, attempts = self._send_round(sampled)
        update = self._boundary["update"] = self._actor("rl_update_round", round_id, attempts, scores, selection,
                                                        lr, c.rollout.temperature, r.update_rounds,
                                                        r.num_minibatches, r.max_grad_norm)
        return update

    def _send_round(self, sampled: Round) -> tuple[int, dict[int, int]]:
        """The round's id and its parts on the channel (part -> attempt): the generation workers sent them."""
        return sampled.sent

    def finish_update(self, update) -> dict:
        return get_failing_fast(update, self.config.fault.update_timeout_s,
                                "the trainer's update (fault.update_timeout_s)")[0]

    def sync(self) -> None:
        self.workers.publish()

    def _score(self, sampled: Round) -> list[float]:
        """The round's rewards from the env's verifier (which also draws the next prompts); its responses counted
        and its reward parts kept for ``_sampling_metrics``."""
        answers = sampled.data
        scored = self.workers.call_env("score", [a["text"] for a in answers])
        self.responses += len(answers)
        for key in self._scored:
            self._scored[key].extend(scored[key])
        return scored["rewards"]

    def _sampling_metrics(self) -> dict:
        """The iteration's rewards (over every round sampled) and generation rate."""
        generated = self._generated
        return {"train/reward": float(np.mean(self._scored["rewards"])),
                "reward/outcome": float(np.mean(self._scored["outcome"])),
                "reward/format": float(np.mean(self._scored["format"])),
                "time/generate_s": generated["generate_s"],
                "time/generated_tokens_per_s": generated["tokens"] / max(generated["generate_s"], 1e-9)}

    def iteration_metrics(self, metrics: dict) -> dict:
        oldest = metrics.pop("train/oldest_policy_version", self._trained_version)  # of the rows trained on
        extra = {**self._sampling_metrics(), **self.workers.faults, "train/learning_rate": self._learning_rate,
                 "train/policy_staleness": self._trained_version - oldest}
        if self.workers.lock is not None:
            extra["time/turn_switch_s"] = self.workers.pop_turn_seconds()
        return extra

    def evaluate(self, final: bool) -> dict:
        return self._evaluate("eval")

    def breaks_tie(self, evaluation: dict) -> bool:
        return False  # evaluations are not ranked (best_score None)

    def score(self, evaluation: dict) -> float | None:
        return None

    def record(self, metrics: dict, log: bool) -> None:
        self._log(self.log, metrics)

    def save(self, final: bool, best: bool = False) -> None:
        self._save(final)

    def _log(self, log: MetricsLog, metrics: dict) -> None:
        metrics.setdefault("train/iteration", self.iteration)
        log.log(metrics, self.responses)

    def _save(self, final: bool) -> None:
        """A checkpoint of the run at ``self.iteration`` (in async mode the next batch, already generating, is
        not part of it: a resumed run samples that batch anew); ``final``: also the model in the Hugging Face
        layout."""
        counters = {"iteration": self.iteration, "env_steps": self.responses, "task": self.config.task,
                    "eval": self.evaluations}
        self._write_checkpoint(self.iteration, counters, self._env_state(), self.config.fault.hang_timeout_s)
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
