"""The one training loop of every run, embodied or text: sample -> update (the algorithm may ask for another
sampling round first) -> sync weights -> evaluate, log and checkpoint on their schedules; scale requests are
carried out between iterations, when nothing is in flight.

The loop says when; the run's world says how (``Side``): ``EmbodiedRunner`` (env and rollout workers sample
episodes into the actor over channels; SFT updates without sampling) and ``ReasoningRunner`` (generation workers
answer a text env's prompts, which the driver scores). Both implement the same methods, listed on ``Side``.

With ``side.overlap`` (``rollout.max_staleness=1``, on either world) the next iteration's
first sampling round starts once the update has, runs beside it with the weights from before that update, and is
finished before the weights are synced, so evaluations, checkpoints and resizes never see a round in flight.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, ContextManager, Protocol


@dataclass
class Schedule:
    """When the loop evaluates, logs and checkpoints, in iterations (0: only when the run ends, which always
    evaluates, logs and checkpoints). ``stop_at``: an evaluation score (``Side.score``) that ends the run early."""
    eval_every: int = 0
    checkpoint_every: int = 0
    log_every: int = 1
    stop_at: float | None = None
    stop_key: str = "stop_at"  # the setting that set ``stop_at``, for the message


@dataclass
class Round:
    """One finished sampling round: ``data`` (the world's: episodes, or answers) and its wall-clock span
    (``time.time()``), from which the loop measures how long it ran beside an update."""
    data: Any
    started_at: float
    ended_at: float
    metrics: dict = field(default_factory=dict)
    sent: Any = None  # where the world sent the round's data on (a text round's id and parts on its channel)


class Side(Protocol):
    """What a run's world gives the loop. ``iteration``: iterations done (the loop counts them). ``overlap``: sample
    the next round beside the update. ``samples``: False where updates need no sampling (SFT). ``best_score``: the best evaluation's score
    so far (``score``), whose checkpoint is kept; None where evaluations are not ranked."""
    iteration: int
    overlap: bool
    samples: bool
    best_score: float | None

    def ends(self, iteration: int) -> bool:
        """Whether the run is complete once ``iteration`` iterations are done (its budget is spent)."""

    def breaks_tie(self, evaluation: dict) -> bool:
        """Whether ``evaluation``, whose score equals ``best_score``, is the better one (its checkpoint replaces the
        best)."""

    def can_sample_more(self) -> bool:
        """Whether the budget allows another sampling round for an update that asked for more."""

    def begin_iteration(self) -> dict:
        """Start an iteration: carry out a pending scale request (nothing is in flight); its ``scale/...``
        metrics, or {}."""

    def start_sampling(self, iteration: int, sampling_round: int) -> Any:
        """Start round ``sampling_round`` of the iteration that follows ``iteration`` done ones; a handle."""

    def finish_sampling(self, pending: Any) -> Round:
        """The started round, finished."""

    def training_turn(self, holder: str) -> ContextManager:
        """The trainer's turn on the device slots (a no-op where nothing is shared)."""

    def start_update(self, sampled: Round | None) -> Any:
        """Start the update on ``sampled`` (None without sampling); a handle."""

    def finish_update(self, handle: Any) -> dict:
        """The update's metrics; ``train/needs_more`` true when the algorithm wants another round first."""

    def sync(self) -> None:
        """The trainer's weights to the samplers."""

    def iteration_metrics(self, metrics: dict) -> dict:
        """The world's metrics of the iteration just done (``metrics``: the loop's own, to derive from)."""

    def evaluate(self, final: bool) -> dict:
        """One evaluation's metrics."""

    def score(self, evaluation: dict) -> float | None:
        """The figure that ranks evaluations (best checkpoint, ``Schedule.stop_at``); None: not ranked."""

    def record(self, metrics: dict, log: bool) -> None:
        """Report an iteration (progress); ``log``: also write ``metrics`` to the run's log."""

    def save(self, final: bool, best: bool = False) -> None:
        """A checkpoint of the run (``best``: into the best evaluation's place)."""


class TrainingLoop:
    """Runs ``side`` to the end of its budget on ``schedule``."""

    def __init__(self, side: Side, schedule: Schedule):
        self.side = side
        self.schedule = schedule
        self.stopped = False  # an evaluation reached ``schedule.stop_at``

    def run(self) -> None:
        side = self.side
        start = time.perf_counter()
        carried: Round | None = None  # in overlap mode: the round sampled beside the last update
        while (carried is not None or not side.ends(side.iteration)) and not self.stopped:  # a sampled round trains
            began = time.perf_counter()
            metrics = side.begin_iteration()
            times = {"time/sample_s": 0.0, "time/update_wall_s": 0.0, "time/sync_s": 0.0}
            rounds, beside = 0, None
            while True:  # sampling rounds until the algorithm has enough to update on
                sampled = None
                if side.samples:
                    waited = time.perf_counter()
                    sampled = carried or side.finish_sampling(side.start_sampling(side.iteration, rounds))
                    carried = None
                    times["time/sample_s"] += time.perf_counter() - waited
                    rounds += 1
                with side.training_turn("update"):
                    updating, update_started = time.perf_counter(), time.time()
                    handle = side.start_update(sampled)
                    pending = (side.start_sampling(side.iteration + 1, 0)
                               if side.overlap and side.samples and not side.ends(side.iteration + 1) else None)
                    updated = side.finish_update(handle)
                    metrics.update(updated)
                    update_ended = time.time()
                    times["time/update_wall_s"] += time.perf_counter() - updating
                    if pending is not None:
                        waited = time.perf_counter()
                        carried = beside = side.finish_sampling(pending)
                        times["time/sample_s"] += time.perf_counter() - waited
                    more = bool(updated.get("train/needs_more", False))
                    if not more:
                        syncing = time.perf_counter()
                        side.sync()
                        times["time/sync_s"] += time.perf_counter() - syncing
                if not more or carried is None and not side.can_sample_more():
                    break
            side.iteration += 1
            metrics.update(times)
            if side.samples:  # how long the next round ran beside this update (0 when synchronous)
                metrics["time/overlap_s"] = (0.0 if beside is None else max(
                    0.0, min(update_ended, beside.ended_at) - max(update_started, beside.started_at)))
                if beside is not None:
                    metrics.update({"time/sample_started_at": beside.started_at,
                                    "time/sample_ended_at": beside.ended_at})
            now = time.perf_counter()
            metrics.update({"train/iteration": side.iteration, "time/iteration_s": now - began,
                            "time/elapsed_s": now - start})
            if side.samples:
                metrics["train/sampling_rounds"] = rounds
            metrics.update(side.iteration_metrics(metrics))
            self.after_iteration(metrics, carried is None and side.ends(side.iteration))

    def after_iteration(self, metrics: dict, finished: bool) -> None:
        """Evaluate, log and checkpoint on their schedules (and always at the end); keep the best checkpoint."""
        side, s = self.side, self.schedule
        score = None
        if finished or (s.eval_every and side.iteration % s.eval_every == 0):
            evaluation = side.evaluate(finished)
            metrics.update(evaluation)
            score = side.score(evaluation)
            if s.stop_at is not None and score is not None and score >= s.stop_at and not finished:
                print(f"evaluation score {score:.3f} reached {s.stop_key}={s.stop_at}: stopping", file=sys.stderr,
                      flush=True)
                self.stopped = finished = True
        side.record(metrics, log=finished or side.iteration % s.log_every == 0)
        if score is not None and (side.best_score is None or score > side.best_score
                                  or score == side.best_score and side.breaks_tie(evaluation)):
            side.best_score = score
            side.save(final=False, best=True)
        if finished or (s.checkpoint_every and side.iteration % s.checkpoint_every == 0):
            side.save(final=finished)
