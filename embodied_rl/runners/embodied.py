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

from embodied_rl.algorithms.embodied import algorithm_needs
from embodied_rl.config.errors import ConfigError
from embodied_rl.config.loader import to_yaml
from embodied_rl.config.schema import TrainConfig
from embodied_rl.runners.autoscale import Autoscaler, Limits, env_step, wait_shares
from embodied_rl.runners.demonstrations import load_demo_transitions, load_sft_demonstrations
from embodied_rl.runners.eval_video import record_eval_video
from embodied_rl.runners.evaluation import episode_metrics, evaluate_policy
from embodied_rl.runners.scale_requests import take_scale_request
from embodied_rl.runners.setup import ScaleError, ScaleRolledBack, start_workers
from embodied_rl.runners.device_turns import PhaseTurns
from embodied_rl.runtime import Cluster
from embodied_rl.runtime.deadlines import DeadlineExceeded, get_within
from embodied_rl.runtime.device_lock import DeviceLock
from embodied_rl.utils.atomic import write_text_atomic
from embodied_rl.utils.checkpoint import Checkpoint, load_checkpoint, save_checkpoint, sweep_checkpoint_leftovers
from embodied_rl.utils.metrics_log import MetricsLog
from embodied_rl.utils.progress import TrainingProgress


BEST_CHECKPOINT_DIR = "best_checkpoint"
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
        self.best_success = -1.0  # best eval success_once so far (its checkpoint is in best_checkpoint/)
        self.turns: list = []  # the device lock's TurnRecords of the last run: who held which slots when
        self.autoscaler: Autoscaler | None = None
        self.reached_success = False  # an evaluation reached eval.stop_at_success: the run ends

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
        c = self.config
        sweep_checkpoint_leftovers(self.run_dir, ("checkpoints", BEST_CHECKPOINT_DIR))
        with Cluster(c.cluster.address, c.cluster.num_cpus) as cluster:
            if self.resume is not None:
                self.iteration = int(self.resume.counters.get("iteration", 0))
                self.env_steps = int(self.resume.counters.get("env_steps", 0))
                self.best_success = float(self.resume.counters.get("best_success_once", -1.0))
            env_state = self._resumable_env_state()
            # Saved env states continue where the run stopped; without them, fresh states (not the first episodes)
            workers = start_workers(c, cluster, env_seed_offset=0 if env_state else self.env_steps)
            if env_state:
                ray.get([w.restore.remote(s) for w, s in zip(workers.env.workers, env_state)])
            self.autoscaler = self._autoscaler(workers) if c.autoscale.enabled and not self.supervised else None
            lock = DeviceLock.create(cluster.session_id)
            turns = PhaseTurns(workers, lock, offload=c.placement.offload == "auto", weight_sync=c.rollout.weight_sync)
            print(f"{workers.placement.describe()}; {turns.describe()}", file=sys.stderr, flush=True)
            log = MetricsLog(self.run_dir, self.env_steps if self.resume is not None else None)
            progress = (TrainingProgress(self.total_iterations(), f"{c.task} sft", unit="iterations")
                        if self.supervised else TrainingProgress(c.total_env_steps, c.task))
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
                        get_within(workers.actor.call("load_demonstrations", load_sft_demonstrations(c)),
                                   c.fault.hang_timeout_s, "the actor loading the demonstrations")
                    elif algorithm_needs(c.algorithm).demonstrations == "mixed":
                        get_within(workers.actor.call("load_demo_transitions", load_demo_transitions(c)),
                                   c.fault.hang_timeout_s, "the actor loading the demonstration transitions")
                    turns.publish_weights()
                try:
                    if self.supervised:
                        self._sft_loop(workers, turns, log, progress)
                    elif c.rollout.max_staleness:
                        self._overlapped_loop(workers, turns, log, progress)
                    else:
                        self._loop(workers, turns, log, progress)
                except KeyboardInterrupt:  # Ctrl-C or SIGTERM (cluster.install_interrupt_handler)
                    self._checkpoint_on_interrupt(workers, turns)
                    raise
                except Exception as error:  # a failure on the driver's side (a lost worker, a timeout, ...)
                    self._checkpoint_on_interrupt(workers, turns, failure=error)
                    raise
                turns.close()
            finally:
                try:
                    self.turns = lock.turns()
                except Exception:  # the lock's actor died (its records with it): the run's own error says more
                    self.turns = []
                lock.close()
                progress.close()
                log.close()
                workers.shutdown()
        return self.last_eval

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

    def _loop(self, workers, turns: PhaseTurns, log: MetricsLog, progress: TrainingProgress) -> None:
        c = self.config
        start_steps, start_time = self.env_steps, time.perf_counter()
        while self.env_steps < c.total_env_steps and not self.reached_success:
            scaled = self._apply_scale_request(workers, turns)
            t0 = time.perf_counter()
            episodes, sample_s, update_s, rounds = [], 0.0, 0.0, 0
            while True:  # sampling rounds until the algorithm has enough to update on
                rounds += 1
                with turns.sampling("sample"):
                    t_sample = time.perf_counter()
                    episodes += workers.sample(c.rollout.steps_per_iteration)
                    sample_s += time.perf_counter() - t_sample
                self.env_steps += self.steps_per_iteration()
                with turns.training("update"):
                    t_update = time.perf_counter()
                    progress_done = self.env_steps / c.total_env_steps
                    metrics = workers.finish_update(workers.start_update(progress_done))
                    update_s += time.perf_counter() - t_update
                    if not metrics["train/needs_more"]:
                        turns.publish_weights()
                if not metrics["train/needs_more"] or self.env_steps >= c.total_env_steps:
                    break
            t3 = time.perf_counter()
            self.iteration += 1
            self._round_metrics(metrics, workers, episodes, scaled)
            timings = turns.pop_timings()
            metrics.update(timings)
            metrics.update({"time/sample_s": sample_s, "time/update_wall_s": update_s,
                            "time/sync_s": timings.get("time/sync_install_s", 0.0)
                            + timings.get("time/sync_publish_s", 0.0) + timings.get("time/sync_broadcast_s", 0.0),
                            "time/turn_switch_s": (t3 - t0) - sample_s - update_s,
                            "time/sample_steps_per_s": self.steps_per_iteration() * rounds / max(sample_s, 1e-9),
                            "time/steps_per_s": (self.env_steps - start_steps) / (t3 - start_time),
                            "train/iteration": self.iteration, "time/elapsed_s": t3 - start_time,
                            "sample/env_steps_simulated": workers.env_steps_simulated})
            self._after_iteration(workers, turns, log, metrics, self.env_steps >= c.total_env_steps)
            progress.update(self.env_steps, self.last_eval.get("eval/success_once"))

    def _overlapped_loop(self, workers, turns: PhaseTurns, log: MetricsLog, progress: TrainingProgress) -> None:
        """``rollout.max_staleness=1``: while the actor updates on round k, the env and rollout workers sample round
        k + 1 (in a driver thread) with the weights from before that update; weights are synced once both are
        done. Evaluations, checkpoints and resizes happen between iterations, with nothing in flight."""
        from concurrent.futures import ThreadPoolExecutor

        c = self.config
        start_steps, start_time = self.env_steps, time.perf_counter()
        pool = ThreadPoolExecutor(1, thread_name_prefix="sampling")

        def sample_round():
            with turns.sampling("sample"):
                started = time.time()
                episodes = workers.sample(c.rollout.steps_per_iteration)
                return episodes, started, time.time(), workers.last_round

        try:
            current = sample_round()
            self.env_steps += self.steps_per_iteration()
            while True:
                scaled = self._apply_scale_request(workers, turns)
                t0 = time.perf_counter()
                episodes, _, _, sampled = current
                with turns.training("update"):
                    update = workers.start_update(self.env_steps / c.total_env_steps, sampled)
                    more = self.env_steps < c.total_env_steps
                    following = pool.submit(sample_round) if more else None
                    metrics = workers.finish_update(update)
                    if following is not None:
                        current = following.result()  # the round's own deadlines (hung workers) bound it
                        self.env_steps += self.steps_per_iteration()
                        metrics.update({"time/sample_started_at": current[1], "time/sample_ended_at": current[2]})
                    if not metrics["train/needs_more"]:
                        turns.publish_weights()
                t1 = time.perf_counter()
                self.iteration += 1
                self._round_metrics(metrics, workers, episodes, scaled)
                metrics.update(turns.pop_timings())
                metrics.update({"time/iteration_s": t1 - t0, "train/iteration": self.iteration,
                                "sample/env_steps_simulated": workers.env_steps_simulated,
                                "time/steps_per_s": (self.env_steps - start_steps) / (t1 - start_time),
                                "time/elapsed_s": t1 - start_time})
                self._after_iteration(workers, turns, log, metrics, not more)
                progress.update(self.env_steps, self.last_eval.get("eval/success_once"))
                if not more or self.reached_success:
                    break
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _autoscaler(self, workers) -> Autoscaler:
        a, slots = self.config.autoscale, workers.placement.slots
        group_size = workers.env.worker_kwargs.get("group_size")
        limits = Limits(a.min_env_workers, a.max_env_workers or max(len(slots["env"]), len(workers.env)),
                        a.min_rollout_workers, a.max_rollout_workers or max(len(slots["rollout"]), len(workers.rollout)),
                        env_step(int(workers.env.worker_kwargs["envs_per_worker"]), group_size))
        return Autoscaler(limits, a.threshold, a.every_iterations)

    def _round_metrics(self, metrics: dict, workers, episodes: list[dict], scaled: dict) -> None:
        """Add what every iteration logs of its sampling: the round's ``time/env_waiting_share`` and
        ``time/rollout_idle_share`` (also fed to the autoscaler), its episodes, the fault counters, a resize."""
        shares = wait_shares(workers.last_env_seconds, workers.last_serving or [])
        if self.autoscaler is not None:
            self.autoscaler.observe(shares)
        metrics.update(shares)
        metrics.update(episode_metrics(episodes, "train"))
        metrics.update(workers.faults)
        metrics.update(scaled)

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
        self.config.env.num_workers, self.config.rollout.num_workers = len(workers.env), len(workers.rollout)
        if (self.run_dir / "config.yaml").is_file():  # --resume reads it: continue at the new sizes
            write_text_atomic(self.run_dir / "config.yaml", to_yaml(self.config))
        metrics["scale/request_to_resized_s"] = max(time.time() - request["requested_at"], 0.0)
        metrics["scale/autoscaled"] = float(auto)
        if self.autoscaler is not None:
            self.autoscaler.restart()
        print(f"scaled: env workers {before[0]} -> {len(workers.env)}, rollout workers {before[1]} -> "
              f"{len(workers.rollout)} in {metrics['scale/resize_s']:.1f} s", file=sys.stderr, flush=True)
        return metrics

    def _sft_loop(self, workers, turns: PhaseTurns, log: MetricsLog, progress: TrainingProgress) -> None:
        a = self.config.algorithm
        start_time = time.perf_counter()
        while self.iteration < self.total_iterations() and not self.reached_success:
            steps = min(a.steps_per_iteration, a.gradient_steps - self.iteration * a.steps_per_iteration)
            with turns.training("update"):
                metrics = ray.get(workers.actor.call("sft_update", steps)[0])
                turns.publish_weights()
            self.iteration += 1
            metrics.update(turns.pop_timings())
            metrics.update({"train/iteration": self.iteration, "time/elapsed_s": time.perf_counter() - start_time})
            self._after_iteration(workers, turns, log, metrics, self.iteration >= self.total_iterations())
            progress.update(self.iteration, self.last_eval.get("eval/success_once"))

    def _after_iteration(self, workers, turns: PhaseTurns, log: MetricsLog, metrics: dict, finished: bool) -> None:
        """Evaluate, log and checkpoint on their schedules (and always at the end); keep the best checkpoint."""
        c = self.config
        evaluated = False
        if finished or (c.eval.every_iterations and self.iteration % c.eval.every_iterations == 0):
            t4 = time.perf_counter()
            with turns.sampling("evaluate"):
                self.last_eval = evaluate_policy(workers, c.eval)
                self.last_eval["time/eval_s"] = time.perf_counter() - t4
                metrics.update(record_eval_video(workers, c.eval, self.run_dir, self.iteration, finished))
            metrics.update(self.last_eval)
            evaluated = True
            target = c.eval.stop_at_success
            if target is not None and self.last_eval.get("eval/success_once", -1.0) >= target and not finished:
                print(f"eval success_once {self.last_eval['eval/success_once']:.3f} reached eval.stop_at_success="
                      f"{target}: stopping", file=sys.stderr, flush=True)
                self.reached_success = finished = True
        if finished or self.iteration % c.log_every_iterations == 0:
            log.log(metrics, self.env_steps)
        if evaluated and self.last_eval.get("eval/success_once", -1.0) > self.best_success:
            self.best_success = self.last_eval["eval/success_once"]
            with turns.training("best_checkpoint"):
                self.save(workers, self.run_dir / BEST_CHECKPOINT_DIR, keep_last=1)
        if finished or (c.checkpoint.every_iterations and self.iteration % c.checkpoint.every_iterations == 0):
            with turns.training("checkpoint"):
                self.save(workers)

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
            path = self.save(workers, interrupted=True, timeout=INTERRUPT_CHECKPOINT_TIMEOUT_S, reason=reason)
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

    def save(self, workers, directory: Path | None = None, keep_last: int | None = None,
             interrupted: bool = False, timeout: float | None = None, reason: str = "interrupt") -> Path:
        """Checkpoint into ``directory`` (default ``run_dir/checkpoints``); ``timeout``: seconds to wait for the
        actor's state (``ray.exceptions.GetTimeoutError`` after). ``interrupted``: a stop checkpoint
        (``interrupted_iter_N``, counters marked with ``reason``, no env states), never a clean one's replacement."""
        state = ray.get(workers.actor.call("training_state")[0], timeout=timeout)
        counters = {"iteration": self.iteration, "env_steps": self.env_steps, "policy_spec": workers.policy_spec,
                    "task": self.config.task, "best_success_once": self.best_success,
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
