"""Training on simulator envs with any registered algorithm.

RL (ppo, grpo, ...): sample through env and rollout workers, update on the actor, sync weights, repeat; an
algorithm that filters what it samples (GRPO's dynamic sampling) may ask for more sampling rounds before it updates.
SFT: the actor clones demonstrations; env and rollout workers only evaluate.

Sampling and updating are turns on the device slots (``runners/device_turns.py``): where they share slots, each phase
holds the device lock for its turn and the idle side is offloaded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import ray
import yaml

from embodied_rl.algorithms.embodied import algorithm_needs
from embodied_rl.config.errors import ConfigError
from embodied_rl.config.loader import to_yaml
from embodied_rl.config.schema import SCORE_LABELS, TrainConfig
from embodied_rl.runners.autoscale import Autoscaler, Limits, env_step, wait_shares
from embodied_rl.runners.demonstrations import load_demo_transitions, load_sft_demonstrations
from embodied_rl.runners.eval_video import record_eval_video
from embodied_rl.runners.evaluation import episode_metrics, evaluate_policy
from embodied_rl.runners.loop import Round, Schedule, TrainingLoop
from embodied_rl.runners.scale_requests import take_scale_request
from embodied_rl.runners.setup import ScaleError, ScaleRolledBack, actor_result, start_workers
from embodied_rl.runners.device_turns import PhaseTurns
from embodied_rl.runtime import Cluster
from embodied_rl.runtime.deadlines import DeadlineExceeded, get_within
from embodied_rl.runtime.device_lock import DeviceLock
from embodied_rl.utils.atomic import write_text_atomic
from embodied_rl.utils.checkpoint import Checkpoint, load_checkpoint, save_checkpoint, sweep_checkpoint_leftovers
from embodied_rl.utils.metrics_log import MetricsLog
from embodied_rl.utils.progress import TrainingProgress


BEST_CHECKPOINT_DIR = "best_checkpoint"
BEST_RETURN_KEY = "best_checkpoint_return"
"""Checkpoint counter: the return of the best evaluation so far, which breaks ties of its success rate."""
"""Where the run keeps the checkpoint of its best evaluation (highest success_once), beside checkpoints/."""

INTERRUPT_CHECKPOINT_TIMEOUT_S = 120.0
"""How long an interrupted run waits for the actor (busy finishing an update) to hand over its state."""


class EmbodiedRunner:
    """Owns one training run in ``run_dir``: cluster, workers, logs and checkpoints."""

    def __init__(self, config: TrainConfig, run_dir: Path, resume: Checkpoint | None = None):
        self.config = config
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.iteration = 0
        self.env_steps = 0
        self.last_eval: dict = {}
        # The best evaluation's score (``eval.score``) so far; its checkpoint is in best_checkpoint/. A success rate
        # starts at -1 (beaten by any evaluation); a return, which may be negative, at None.
        self.best_key = f"best_{config.eval.score}"
        self.best_score = -1.0 if config.eval.score.startswith("success") else None
        # Success on a fixed set of states moves in steps of 1/episodes, so a plateau repeats the same score: of equal
        # success rates the higher return (the faster, surer policy) is the best, not the first.
        self.best_return: float | None = None
        self.turns: list = []  # the device lock's TurnRecords of the last run: who held which slots when
        self.autoscaler: Autoscaler | None = None
        self.reached_success = False  # an evaluation reached eval.stop_at_success: the run ended there
        self._pool = None  # overlapped sampling's driver thread
        self._episodes, self._rounds, self._start_steps = [], 0, 0
        self.summary: dict = {}  # the finished run's summary (summary.json)

    def _choose_placement(self, cluster) -> None:
        """``placement.auto``: profile, choose, print why, and record the choice (``auto_placement.txt``; and
        ``config.yaml`` of a single-stage run, which ``--resume`` reads). A ``components`` map given wins; an SFT
        stage (no sampling rounds to weigh) keeps the default placement."""
        from embodied_rl.config.schema import validate
        from embodied_rl.runners.auto_placement import apply_choice, choose

        c = self.config
        if dict(c.placement.components) or self.supervised:
            why = (f"placement.components={dict(c.placement.components)} is given and wins"
                   if dict(c.placement.components) else "an SFT stage has no sampling rounds to weigh")
            print(f"placement.auto: {why}; not profiling", file=sys.stderr, flush=True)
            c.placement.auto = False
            return
        choice = choose(c, cluster)
        apply_choice(c, choice)
        validate(c)
        print(choice.report(), file=sys.stderr, flush=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.run_dir / "auto_placement.txt", choice.report() + "\n")
        saved = self.run_dir / "config.yaml"
        if saved.is_file() and not (yaml.safe_load(saved.read_text()) or {}).get("stages"):
            write_text_atomic(saved, to_yaml(c))

    def steps_per_iteration(self) -> int:
        """Env steps of one sampling round."""
        c = self.config
        return c.env.num_workers * c.env.envs_per_worker * c.rollout.steps_per_iteration

    @property
    def supervised(self) -> bool:
        return algorithm_needs(self.config.algorithm).demonstrations == "only"

    def total_iterations(self) -> int:
        """SFT: gradient steps of the stage in iterations of ``algorithm.steps_per_iteration``."""
        a = self.config.algorithm
        return -(-a.gradient_steps // a.steps_per_iteration)

    def run(self) -> dict:
        """Train to the end of the budget; the final evaluation's metrics (``self.summary``: the run's summary)."""
        c = self.config
        started, ended = time.perf_counter(), "failed"
        sweep_checkpoint_leftovers(self.run_dir, ("checkpoints", BEST_CHECKPOINT_DIR))
        with Cluster(c.cluster.address, c.cluster.num_cpus) as cluster:
            if c.placement.auto:
                self._choose_placement(cluster)
            if self.resume is not None:
                self.iteration = int(self.resume.counters.get("iteration", 0))
                self.env_steps = int(self.resume.counters.get("env_steps", 0))
                self.best_score = self.resume.counters.get(self.best_key, self.best_score)
                self.best_return = self.resume.counters.get(BEST_RETURN_KEY)
            env_state = self._resumable_env_state()
            # Saved env states continue where the run stopped; without them, fresh states (not the first episodes)
            workers = start_workers(c, cluster, env_seed_offset=0 if env_state else self.env_steps)
            if env_state:
                ray.get([w.restore.remote(s) for w, s in zip(workers.env.workers, env_state)])
            self.autoscaler = self._autoscaler(workers) if c.autoscale.enabled and not self.supervised else None
            lock = DeviceLock.create(cluster.session_id)
            turns = PhaseTurns(workers, lock, offload=c.placement.offload == "auto", weight_sync=c.rollout.weight_sync)
            print(f"{workers.placement.describe()}; {turns.describe()}", file=sys.stderr, flush=True)
            log = self._metrics_log()
            progress = (TrainingProgress(self.total_iterations(), f"{c.task} sft", unit="iterations",
                                         done=self.iteration)
                        if self.supervised else TrainingProgress(c.total_env_steps, c.task, done=self.env_steps,
                                                                 metric=SCORE_LABELS[c.eval.score]))
            try:
                turns.start()
                with turns.training("setup"):
                    if self.resume is not None:
                        get_within(workers.actor.call("load_training_state", self.resume.weights,
                                                      self.resume.trainer_state),
                                   c.fault.hang_timeout_s, "the actor loading the checkpoint")
                    elif c.init_from:
                        get_within(workers.actor.call("load_training_state", load_checkpoint(c.init_from).weights,
                                                      None),
                                   c.fault.hang_timeout_s, f"the actor loading init_from={c.init_from}")
                    if self.supervised:
                        demos = load_sft_demonstrations(c, workers.policy_spec)
                        get_within(workers.actor.call("load_demonstrations", demos),
                                   c.fault.hang_timeout_s, "the actor loading the demonstrations")
                    elif algorithm_needs(c.algorithm).demonstrations == "mixed":
                        demos = load_demo_transitions(c, workers.policy_spec)
                        get_within(workers.actor.call("load_demo_transitions", demos),
                                   c.fault.hang_timeout_s, "the actor loading the demonstration transitions")
                    turns.publish_weights()
                self.workers, self.phases, self.log, self.progress = workers, turns, log, progress
                try:
                    self._start_steps = self.env_steps
                    loop = TrainingLoop(self, self.schedule())
                    loop.run()
                    self.reached_success = loop.stopped
                except KeyboardInterrupt:  # Ctrl-C or SIGTERM (cluster.install_interrupt_handler)
                    ended = "killed"
                    self._checkpoint_on_interrupt(workers, turns)
                    raise
                except Exception as error:  # a failure on the driver's side (a lost worker, a timeout, ...)
                    self._checkpoint_on_interrupt(workers, turns, failure=error)
                    raise
                turns.close()
                self.summary = self._summary(started)
                ended = "finished"
            finally:
                if self._pool is not None:
                    self._pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = None
                try:
                    self.turns = lock.turns()
                except Exception:  # the lock's actor died (its records with it): the run's own error says more
                    self.turns = []
                lock.close()
                progress.close()
                log.close(self.summary if ended == "finished" else None, ended)
                workers.shutdown()
        return self.last_eval

    def _metrics_log(self) -> MetricsLog:
        """The run's log: ``metrics.jsonl`` and the trackers of ``logging``, stepped by env steps (an SFT stage, whose
        env steps stay 0: by iteration), trimmed to the resumed checkpoint."""
        step_key, at = ("train/iteration", self.iteration) if self.supervised else ("env_steps", self.env_steps)
        return MetricsLog(self.run_dir, at if self.resume is not None else None, self.config.logging,
                          to_yaml(self.config), step_key)

    def _summary(self, started: float) -> dict:
        """What ``summary.json`` holds of this run (also its trackers' summary)."""
        return {"run_dir": str(self.run_dir), "env_steps": self.env_steps, "iterations": self.iteration,
                "wall_s": round(time.perf_counter() - started, 1), self.best_key: self.best_score,
                **self.last_eval}

    def _resumable_env_state(self) -> list | None:
        """The resumed checkpoint's env worker snapshots, if they fit this run's env layout (a resume that changes
        env.num_workers or env.envs_per_worker starts fresh episodes, with a note)."""
        state = self.resume.env_state if self.resume is not None else None
        if not state or any(s is None for s in state):
            return None
        e = self.config.env
        layout = [s["layout"] for s in state]
        if (len(state) != e.num_workers or any(l["envs"] != e.envs_per_worker or l["stages"] != e.pipeline_stages
                                               for l in layout)):
            print(f"note: the checkpoint's env states are of {len(state)} env workers x {layout[0]['envs']} envs; "
                  f"this run has {e.num_workers} x {e.envs_per_worker}: its envs start fresh episodes",
                  file=sys.stderr, flush=True)
            return None
        return state

    # The training loop's side (runners/loop.py): how an embodied run samples, updates, syncs and reports.

    @property
    def overlap(self) -> bool:
        return bool(self.config.rollout.max_staleness) and not self.supervised

    @property
    def samples(self) -> bool:
        return not self.supervised

    def schedule(self) -> Schedule:
        c = self.config
        return Schedule(c.eval.every_iterations, c.checkpoint.every_iterations, c.log_every_iterations,
                        c.eval.stop_at_success, "eval.stop_at_success")

    def ends(self, iteration: int) -> bool:
        if self.supervised:
            return iteration >= self.total_iterations()
        return self.env_steps >= self.config.total_env_steps

    def can_sample_more(self) -> bool:
        return self.env_steps < self.config.total_env_steps

    def begin_iteration(self) -> dict:
        self._episodes, self._rounds = [], 0
        return {} if self.supervised else self._apply_scale_request(self.workers, self.phases)

    def start_sampling(self, iteration: int, sampling_round: int):
        """Synchronous: nothing (the round runs in ``finish_sampling``); overlapped: the round in a driver thread,
        so that it runs beside the update."""
        if not self.overlap:
            return None
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="sampling")
        return self._pool.submit(self._sample_round)

    def finish_sampling(self, pending) -> Round:
        sampled = self._sample_round() if pending is None else pending.result()  # the round's deadlines bound it
        self.env_steps += self.steps_per_iteration()
        return sampled

    def _sample_round(self) -> Round:
        """One round on every env worker (``rollout.steps_per_iteration`` steps), in a sampling turn; ``data``: its
        finished episodes and the round (``SampledRound``) the actor's update takes."""
        with self.phases.sampling("sample"):
            started = time.time()
            episodes = self.workers.sample(self.config.rollout.steps_per_iteration)
            return Round((episodes, self.workers.last_round), started, time.time())

    def training_turn(self, holder: str):
        return self.phases.training(holder)

    def start_update(self, sampled: Round | None):
        if sampled is None:  # SFT: the iteration's gradient steps on the demonstrations
            a = self.config.algorithm
            steps = min(a.steps_per_iteration, a.gradient_steps - self.iteration * a.steps_per_iteration)
            return self.workers.actor.call("sft_update", steps)
        episodes, round_ = sampled.data
        self._episodes += episodes
        self._rounds += 1
        return self.workers.start_update(self.env_steps / self.config.total_env_steps, round_)

    def finish_update(self, handle) -> dict:
        if self.supervised:
            return actor_result(handle, self.config.fault.update_timeout_s, "the actor's SFT update")
        return self.workers.finish_update(handle)

    def sync(self) -> None:
        self.phases.publish_weights()

    def iteration_metrics(self, metrics: dict) -> dict:
        """The round's episodes, shares and faults (``_round_metrics``), the turns' timings, and the env
        step rates (``time/turn_switch_s``: the iteration's time outside sampling, update and sync)."""
        timings = self.phases.pop_timings()
        if self.supervised:
            return timings
        extra = {}
        self._round_metrics(extra, self.workers, self._episodes)
        extra.update(timings)
        extra["time/sync_s"] = metrics["time/sync_s"] + timings.get("time/sync_install_s", 0.0)
        if not self.overlap:
            extra["time/turn_switch_s"] = max(metrics["time/iteration_s"] - metrics["time/sample_s"]
                                              - metrics["time/update_wall_s"] - extra["time/sync_s"], 0.0)
            extra["time/sample_steps_per_s"] = (self.steps_per_iteration() * self._rounds
                                                / max(metrics["time/sample_s"], 1e-9))
        extra["time/steps_per_s"] = (self.env_steps - self._start_steps) / metrics["time/elapsed_s"]
        extra["sample/env_steps_simulated"] = self.workers.env_steps_simulated
        return extra

    def evaluate(self, final: bool) -> dict:
        started = time.perf_counter()
        with self.phases.sampling("evaluate"):
            self.last_eval = evaluate_policy(self.workers, self.config.eval)
            self.last_eval["time/eval_s"] = time.perf_counter() - started
            video, path = record_eval_video(self.workers, self.config.eval, self.run_dir, self.iteration, final)
        if path is not None:
            self.log.log_video(path, self.env_steps, self.iteration if self.supervised else None)
        return {**self.last_eval, **video}

    def score(self, evaluation: dict) -> float | None:
        return evaluation.get(f"eval/{self.config.eval.score}")

    def breaks_tie(self, evaluation: dict) -> bool:
        """A success rate equal to the best one's with a higher return (``eval.score=episode_return`` has no tie
        to break)."""
        ret = evaluation.get("eval/episode_return")
        return (self.config.eval.score != "episode_return" and ret is not None
                and (self.best_return is None or ret > self.best_return))

    def record(self, metrics: dict, log: bool) -> None:
        if log:
            self.log.log(metrics, self.env_steps)
        self.progress.update(self.iteration if self.supervised else self.env_steps,
                             self.last_eval.get(f"eval/{self.config.eval.score}"))

    def save(self, final: bool, best: bool = False) -> None:
        with self.phases.training("best_checkpoint" if best else "checkpoint"):
            if best:
                self.best_return = self.last_eval.get("eval/episode_return")  # the tie-break of the next ones
                self.save_checkpoint(self.workers, self.run_dir / BEST_CHECKPOINT_DIR, keep_last=1)
            else:
                self.save_checkpoint(self.workers)

    def _autoscaler(self, workers) -> Autoscaler:
        a, slots = self.config.autoscale, workers.placement.slots
        group_size = workers.env.worker_kwargs.get("group_size")
        limits = Limits(a.min_env_workers, a.max_env_workers or max(len(slots["env"]), len(workers.env)),
                        a.min_rollout_workers, a.max_rollout_workers or max(len(slots["rollout"]), len(workers.rollout)),
                        env_step(int(workers.env.worker_kwargs["envs_per_worker"]), group_size))
        return Autoscaler(limits, a.threshold, a.every_iterations)

    def _round_metrics(self, metrics: dict, workers, episodes: list[dict]) -> None:
        """Add what every iteration logs of its sampling: the round's ``time/env_waiting_share`` and
        ``time/rollout_idle_share`` (also fed to the autoscaler), its episodes, the fault counters."""
        shares = wait_shares(workers.last_env_seconds, workers.last_serving or [])
        if self.autoscaler is not None:
            self.autoscaler.observe(shares)
        metrics.update(shares)
        metrics.update(episode_metrics(episodes, "train"))
        metrics.update(workers.faults)

    def _apply_scale_request(self, workers, turns: PhaseTurns) -> dict:
        """Carry out a pending ``embodied-rl scale`` request, or else the autoscaler's proposal, between iterations
        (nothing is in flight, so no step is lost or counted twice); returns its ``scale/...`` metrics, or {}."""
        try:
            request = take_scale_request(self.run_dir)
        except ConfigError as error:
            print(f"warning: scale request ignored: {error}", file=sys.stderr, flush=True)
            return {}
        auto = False
        if request is None and self.autoscaler is not None:
            proposal = self.autoscaler.proposal(len(workers.env), len(workers.rollout))
            if proposal is not None:
                request, reason = proposal
                request["requested_at"] = time.time()
                print(f"autoscale: {reason}", file=sys.stderr, flush=True)
                auto = True
        if request is None:
            return {}
        before = (len(workers.env), len(workers.rollout))
        try:
            with turns.sampling("scale"):
                metrics = workers.resize(request.get("env"), request.get("rollout"))
        except ScaleRolledBack as error:  # a new worker did not start: the run goes on at the old sizes
            print(f"warning: scale request rolled back: {error}", file=sys.stderr, flush=True)
            if self.autoscaler is not None:
                self.autoscaler.restart()
            return {"scale/rolled_back": 1.0}
        except ScaleError as error:
            print(f"warning: scale request ignored: {error}", file=sys.stderr, flush=True)
            return {}
        self.config.env.num_workers = len(workers.env)
        if not workers.inline:
            self.config.rollout.num_workers = len(workers.rollout)
        if (self.run_dir / "config.yaml").is_file():  # --resume reads it: continue at the new sizes
            write_text_atomic(self.run_dir / "config.yaml", to_yaml(self.config))
        metrics["scale/request_to_resized_s"] = max(time.time() - request["requested_at"], 0.0)
        metrics["scale/autoscaled"] = float(auto)
        if self.autoscaler is not None:
            self.autoscaler.restart()
        print(f"scaled: env workers {before[0]} -> {len(workers.env)}, rollout workers {before[1]} -> "
              f"{len(workers.rollout)} in {metrics['scale/resize_s']:.1f} s", file=sys.stderr, flush=True)
        return metrics

    def _checkpoint_on_interrupt(self, workers, turns: PhaseTurns, failure: BaseException | None = None) -> None:
        """Keep what was trained before an interrupt (or, ``failure``, an exception in the driver's loop with the
        actor alive): a stop checkpoint ``checkpoints/interrupted_iter_N`` of the actor's weights as they are now
        (an update the interrupt cut short finishes on the actor first, so they may be one update past the
        counters, which count finished iterations), marked ``interrupted`` with a ``stop_reason`` in its counters.
        It never replaces the clean ``iter_N`` (which holds the env states an exact resume needs)."""
        if self.iteration == 0:
            return  # nothing trained yet

        def _first_line(error) -> str:
            return str(error).strip().splitlines()[0] if str(error).strip() else ""

        if failure is None:
            print("interrupted: writing a checkpoint (interrupt again to skip it)", file=sys.stderr, flush=True)
            reason, prefix = "interrupt", "warning"
        else:  # one line in all, after the attempt
            reason = prefix = f"failure: {type(failure).__name__}: {_first_line(failure)}"
        try:
            # Outside the turns: the actor's state is readable wherever it lives, and a turn would wait on it twice.
            path = self.save_checkpoint(workers, interrupted=True, timeout=INTERRUPT_CHECKPOINT_TIMEOUT_S, reason=reason)
        except ray.exceptions.GetTimeoutError:
            print(f"{prefix}; no checkpoint written: the actor was still busy after "
                  f"{INTERRUPT_CHECKPOINT_TIMEOUT_S:.0f} s", file=sys.stderr, flush=True)
            return
        except Exception as error:  # a dead actor: the last scheduled checkpoint stays the newest
            print(f"{prefix}; no checkpoint written: {type(error).__name__}: {_first_line(error)}",
                  file=sys.stderr, flush=True)
            return
        if failure is None:
            print(f"checkpoint written: {path}", file=sys.stderr, flush=True)
        else:
            print(f"{reason}; stop checkpoint written: {path}", file=sys.stderr, flush=True)

    def _env_snapshots(self, workers, timeout: float | None) -> list | None:
        """Every env worker's ``snapshot`` for a clean checkpoint; None (a checkpoint without env states, whose
        resume starts fresh episodes) when one died or hung since its round: the next round replaces it."""
        try:
            return get_within(workers.env.call("snapshot"), timeout or self.config.fault.hang_timeout_s,
                              "the env workers' snapshots")
        except (ray.exceptions.RayActorError, DeadlineExceeded) as error:
            print(f"warning: checkpoint of iteration {self.iteration} without env states (a resume from it starts "
                  f"fresh episodes): {type(error).__name__}: {str(error).strip().splitlines()[0]}",
                  file=sys.stderr, flush=True)
            return None

    def save_checkpoint(self, workers, directory: Path | None = None, keep_last: int | None = None,
             interrupted: bool = False, timeout: float | None = None, reason: str = "interrupt") -> Path:
        """Checkpoint into ``directory`` (default ``run_dir/checkpoints``); ``timeout``: seconds to wait for the
        actor's state (``ray.exceptions.GetTimeoutError`` after). ``interrupted``: a stop checkpoint
        (``interrupted_iter_N``, counters marked with ``reason``, no env states), never a clean one's replacement."""
        state = ray.get(workers.actor.call("training_state")[0], timeout=timeout)  # every rank gathers; rank 0's
        counters = {"iteration": self.iteration, "env_steps": self.env_steps, "policy_spec": workers.policy_spec,
                    "task": self.config.task, self.best_key: self.best_score, BEST_RETURN_KEY: self.best_return,
                    "eval": {k: v for k, v in self.last_eval.items() if k.startswith("eval/")}}
        env_state = None
        if interrupted:
            counters["interrupted"] = True  # env workers may be mid-round: their states are not saved
            counters["stop_reason"] = reason
        elif not self.supervised:
            env_state = self._env_snapshots(workers, timeout)
        return save_checkpoint(directory or self.run_dir / "checkpoints", self.iteration, state["weights"],
                               state["trainer_state"], counters, to_yaml(self.config),
                               keep_last or self.config.checkpoint.keep_last,
                               env_state if env_state and all(s is not None for s in env_state) else None,
                               stopped=interrupted)
