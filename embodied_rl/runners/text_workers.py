"""The workers of a text run and what keeps them serving: the text env worker, the generation workers (the text
run's rollout workers) and the trainer (LM actor) ranks; generation rounds split over the generation workers,
a dead or hung one replaced and its part generated again, live resizes (``embodied-rl scale RUN_DIR rollout=N``),
weight sync through the embodied runs' ``WeightSync``, and a deadline on every call."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import ray

from embodied_rl.config import ConfigError
from embodied_rl.config.reasoning import ReasoningConfig, takes_turns, weight_sync
from embodied_rl.runners.device_turns import TURN_TIMEOUT_S
from embodied_rl.runners.resize import MAX_WORKER_RESTARTS
from embodied_rl.runners.scale_requests import take_scale_request
from embodied_rl.runners.weight_sync import WeightSync, get_failing_fast
from embodied_rl.runtime import WorkerGroup
from embodied_rl.runtime.deadlines import DeadlineExceeded, get_within, one_line
from embodied_rl.runtime.device_lock import DeviceLock

WEIGHTS_COLLECTIVE = "reasoning-weights"
"""The collective of trainer rank 0 (its rank 0) and the generation workers, under broadcast weight sync."""
FAULT_COUNTERS = ("fault/rollout_workers_replaced", "fault/responses_regenerated", "fault/responses_lost",
                  "fault/responses_duplicated", "fault/env_workers_replaced")
"""Counted over the run and logged with every iteration: generation (rollout) workers replaced after they died or
missed ``fault.hang_timeout_s``; responses generated again on the replacement (its part of a batch); responses a
batch ended without (0 unless a replacement failed too: then the run stops) or received twice (0); text env workers
replaced (from their last known prompt sampler state)."""
REPLAYABLE_ENV_CALLS = ("state", "restore", "prompts", "score", "heldout_questions", "score_heldout", "sft_examples")
"""The single-turn text env worker's calls that a replacement, restored to the sampler state known before the call,
answers as the dead worker would have (``score`` draws the next prompts: its state is taken again after it)."""


@dataclass
class GenerationRound:
    """A batch of prompts split over the generation workers, started: rank ``r`` answers ``questions[i]`` for ``i``
    in ``parts[r]`` with ``params[r]`` through its ``method``; ``futures[r]`` is its call. With ``round_id`` the
    workers send what the trainer needs on the channel as part ``r`` of that round (``generate_into_channel``),
    ``attempts[r]`` counting the part's replacements (the trainer takes the latest attempt's)."""

    questions: list
    parts: list
    params: list
    method: str
    futures: list
    round_id: int | None = None
    attempts: list = None

    def call(self, worker, rank: int):
        """Rank ``rank``'s call of this round on ``worker`` (again, on a replacement)."""
        questions = [self.questions[i] for i in self.parts[rank]]
        if self.round_id is None:
            return getattr(worker, self.method).remote(questions, self.params[rank])
        return getattr(worker, self.method).remote(questions, self.params[rank], self.round_id, rank,
                                                   self.attempts[rank])

    def sent(self) -> dict[int, int]:
        """Part -> attempt of the parts on the channel (every non-empty one, once finished)."""
        return {rank: self.attempts[rank] for rank, part in enumerate(self.parts) if len(part)}


class TextWorkers:
    """``env`` (the text env worker's handle), ``generation`` and ``actor`` (worker groups), ``weights`` (their
    ``WeightSync``), ``faults`` (``FAULT_COUNTERS``) and ``published_version`` (the version the generation workers
    hold)."""

    def __init__(self, config: ReasoningConfig, env, generation: WorkerGroup, actor: WorkerGroup,
                 env_group: WorkerGroup | None = None, lock: DeviceLock | None = None, slots: dict | None = None):
        self.config = config
        self.env, self.generation, self.actor = env, generation, actor
        # with its group, a dead or hung single-turn env worker is replaced from its last known sampler state
        self.env_group, self.env_state, self.env_restarts = env_group, None, 0
        if env_group is not None:
            self.env_state = get_within(env.state.remote(), config.fault.hang_timeout_s, "the text env worker's state")
        self.published_version = 0
        self.faults = dict.fromkeys(FAULT_COUNTERS, 0)
        self.restarts: dict[int, int] = {}  # generation rank -> replacements so far
        hang = config.fault.hang_timeout_s
        # the ping before a broadcast waits for a generation still running (async rollout), up to the deadline
        self.weights = WeightSync(actor, generation, self.replace_generation, self.call_generation, hang,
                                  config.fault.update_timeout_s, ping_timeout_s=hang, name=WEIGHTS_COLLECTIVE)
        # generation and training on shared slots take turns on the device lock, as embodied sampling and training
        # do (runners/device_turns.py): a side holds its slots (generation: env and rollout's; training: the
        # actor's) for its turn; with placement.offload=auto the idle side's weights (and the trainer's optimizer
        # state) leave the device for the other's turn
        self.lock = lock if takes_turns(config) else None
        self.turn_slots = {"generation": tuple(sorted(set(slots["env"]) | set(slots["rollout"]))),
                           "training": tuple(slots["actor"])} if self.lock is not None else {}
        self.offload_turns = self.lock is not None and config.placement.offload == "auto"
        self.holder: str | None = None  # "generation" or "training": whose turn it is
        self.turn_seconds = 0.0  # spent switching turns since the last ``pop_turn_seconds``

    def turn(self, side: str) -> None:
        """Make it ``side``'s turn ("generation" or "training") on shared slots: the other side offloads and
        releases its slots, this side takes its slots on the device lock and onloads (nothing happens on slots of
        their own, or when it is already ``side``'s turn). Before the first turn, a turn of its own ("start",
        every slot) offloads both sides, which were built on their devices."""
        if self.lock is None or self.holder == side:
            return
        started, hang = time.perf_counter(), self.config.fault.hang_timeout_s
        groups = {"generation": self.generation, "training": self.actor}
        if self.holder is None and self.offload_turns:
            every = tuple(sorted(set(self.turn_slots["generation"]) | set(self.turn_slots["training"])))
            with self.lock.hold(every, "start", TURN_TIMEOUT_S):
                get_failing_fast(self.generation.call("offload") + self.actor.call("offload"), hang,
                                 "the workers' first offload")
        if self.holder is not None:
            leaving = groups[self.holder]
            if self.offload_turns:
                get_failing_fast(leaving.call("offload"), hang, f"the {leaving.name} workers' offload")
            self.lock.release(self.turn_slots[self.holder], self.holder)
            self.holder = None
        self.lock.acquire(self.turn_slots[side], side, TURN_TIMEOUT_S)
        self.holder = side
        if self.offload_turns:
            coming = groups[side]
            get_failing_fast(coming.call("onload"), hang, f"the {coming.name} workers' onload")
        self.turn_seconds += time.perf_counter() - started

    def end_turns(self) -> None:
        """Release the slots of the side whose turn it is (the run is ending)."""
        if self.lock is not None and self.holder is not None:
            self.lock.release(self.turn_slots[self.holder], self.holder)
            self.holder = None

    def pop_turn_seconds(self) -> float:
        seconds, self.turn_seconds = self.turn_seconds, 0.0
        return seconds

    def form_weight_sync(self) -> None:
        """With ``rollout.weight_sync`` broadcast: make trainer rank 0 (the collective's rank 0) and the generation
        workers one collective, NCCL when every member computes on a GPU, else gloo."""
        mode = weight_sync(self.config)
        if mode == "broadcast":
            mode = f"broadcast over {self.weights.form()}"
        print(f"weight sync: {mode}, trainer rank 0 -> {len(self.generation.workers)} generation workers",
              file=sys.stderr, flush=True)

    def publish(self) -> None:
        """The trainer's weights and version to every generation worker (``WeightSync``, the embodied runs' own).

        In async mode a worker may still be generating: Ray runs its calls one at a time, so a receive would wait
        behind the generate while trainer rank 0 sat in the broadcast, bounded by the collective's timeout. The
        sync therefore starts once every worker has answered a ping (a dead or hung one is replaced)."""
        broadcast = self.weights.formed
        if not broadcast:
            self.call_generation("ping")
        self.published_version = self.weights.sync(broadcast)

    def replace_generation(self, rank: int, error) -> None:
        """Replace generation worker ``rank`` (dead, or killed after missing its deadline) and give it the
        trainer's weights; the caller forms the broadcast group anew."""
        restarts = self.restarts.get(rank, 0) + 1
        if restarts > MAX_WORKER_RESTARTS:
            raise RuntimeError(f"generation worker {rank} died {restarts} times (at most {MAX_WORKER_RESTARTS} "
                               f"replacements); last: {one_line(error)}")
        self.restarts[rank] = restarts
        print(f"generation worker {rank} died ({one_line(error)}); replacing it", file=sys.stderr, flush=True)
        worker = self.generation.replace(rank)
        get_within(worker.load_weights.remote(self.weights.full_weights()), self.config.fault.hang_timeout_s,
                   f"generation worker {rank}'s weights (a replacement)")
        self.faults["fault/rollout_workers_replaced"] += 1

    def _answer(self, rank: int, future, resend, what: str) -> tuple[object, int]:
        """``future``'s result (a call on generation worker ``rank``) within ``fault.hang_timeout_s``, and how many
        times the worker was replaced for it: a worker that died or missed the deadline is killed, replaced
        (``replace_generation``, which raises past ``MAX_WORKER_RESTARTS``) and ``resend(worker)`` asks again."""
        replacements = 0
        while True:
            try:
                return get_within(future, self.config.fault.hang_timeout_s, what), replacements
            except (ray.exceptions.RayActorError, DeadlineExceeded) as error:
                ray.kill(self.generation.workers[rank], no_restart=True)
                self.replace_generation(rank, error)
                replacements += 1
                future = resend(self.generation.workers[rank])

    def call_generation(self, method: str, *args) -> list:
        """``method`` on every generation worker (``_answer``: a dead or hung one is replaced and asked again)."""
        results, replaced = [], 0
        for rank, future in enumerate(self.generation.call(method, *args)):
            result, replacements = self._answer(rank, future, lambda worker: getattr(worker, method).remote(*args),
                                                f"generation worker {rank}'s {method}")
            results.append(result)
            replaced += replacements
        if replaced and self.weights.formed:
            self.weights.reform()
        return results

    def start_generation(self, questions: list, temperature: float, seed: int,
                          method: str = "generate", round_id: int | None = None) -> GenerationRound:
        """Split ``questions`` over the generation workers (contiguous parts, so groups stay together mostly) and
        start them. ``method``: the workers' ``generate`` (question strings), ``generate_ids`` (prompt token-id
        lists) or ``generate_into_channel`` (question strings; the trainer's part of the answers goes on the
        channel as round ``round_id``)."""
        self.turn("generation")
        c = self.config.rollout
        parts = [part for part in np.array_split(np.arange(len(questions)), len(self.generation.workers))]
        params = [dict(max_new_tokens=c.max_new_tokens, temperature=temperature, seed=seed * 1009 + rank)
                  for rank in range(len(parts))]
        batch = GenerationRound(questions, parts, params, method, [], round_id, [0] * len(parts))
        batch.futures = [batch.call(worker, rank) if len(part) else None
                         for rank, (worker, part) in enumerate(zip(self.generation.workers, parts))]
        return batch

    def finish_generation(self, batch: GenerationRound) -> list[dict]:
        """The answers of a started round, in question order. A worker that died (or missed
        ``fault.hang_timeout_s``, then it is killed) is replaced and its part generated again on the replacement
        with the same seed; the responses regenerated, lost (a prompt left without one) and duplicated (answers
        beyond a worker's part, or two for one prompt) are counted (``FAULT_COUNTERS``). A dead worker's call
        returns nothing, so a replacement alone cannot duplicate: its part comes from the replacement only."""
        answers: list = [None] * len(batch.questions)
        replaced = 0
        for rank, (part, future) in enumerate(zip(batch.parts, batch.futures)):
            if future is None:
                continue
            got, replacements = self._answer(rank, future, lambda worker: self._again(batch, worker, rank),
                                             f"generation worker {rank}'s {len(part)} responses")
            replaced += replacements
            self.faults["fault/responses_regenerated"] += replacements * len(part)
            if len(got) > len(part):  # a worker that answered more than it was asked
                self.faults["fault/responses_duplicated"] += len(got) - len(part)
            for index, answer in zip(part, got):
                if answers[index] is not None:
                    self.faults["fault/responses_duplicated"] += 1
                answers[index] = answer
        if replaced and self.weights.formed:
            self.weights.reform()
        lost = sum(answer is None for answer in answers)
        if lost:
            self.faults["fault/responses_lost"] += lost
            raise RuntimeError(f"a generation round ended without {lost} of its {len(answers)} responses")
        return answers

    @staticmethod
    def _again(batch: GenerationRound, worker, rank: int):
        """Rank ``rank``'s part of ``batch`` asked again of ``worker`` (a replacement), as a new attempt."""
        batch.attempts[rank] += 1
        return batch.call(worker, rank)

    def generate(self, questions: list[str], temperature: float, seed: int) -> list[dict]:
        return self.finish_generation(self.start_generation(questions, temperature, seed))

    def call_env(self, method: str, *args):
        """A call on the text env worker within ``fault.hang_timeout_s``. With ``env_group`` (single-turn tasks) a
        worker that died or missed the deadline is killed and replaced, restored to the prompt sampler state known
        before the call (taken at every ``state`` call and after every ``score``), and asked again: the answer is
        the one the dead worker would have given. Without it (or past ``MAX_WORKER_RESTARTS``) the run ends, and
        ``--retries`` / ``--resume`` continue it."""
        while True:
            try:
                result = get_within(getattr(self.env, method).remote(*args), self.config.fault.hang_timeout_s,
                                    f"the text env worker's {method}")
                break
            except (ray.exceptions.RayActorError, DeadlineExceeded) as error:
                if self.env_group is None or method not in REPLAYABLE_ENV_CALLS:
                    raise
                self._replace_env(error)
        if method == "state":
            self.env_state = result
        elif method == "restore":
            self.env_state = args[0]
        elif method == "score" and self.env_group is not None:
            self.env_state = self.call_env("state")
        return result

    def _replace_env(self, error) -> None:
        self.env_restarts += 1
        if self.env_restarts > MAX_WORKER_RESTARTS:
            raise RuntimeError(f"the text env worker died {self.env_restarts} times (at most {MAX_WORKER_RESTARTS} "
                               f"replacements); last: {one_line(error)}")
        print(f"text env worker died ({one_line(error)}); replacing it from its last sampler state",
              file=sys.stderr, flush=True)
        self.env = self.env_group.replace(0)
        get_within(self.env.restore.remote(self.env_state), self.config.fault.hang_timeout_s,
                   "the replacement text env worker's restore")
        self.faults["fault/env_workers_replaced"] += 1

    def apply_scale_request(self, run_dir: Path) -> dict:
        """A pending ``embodied-rl scale RUN_DIR rollout=N`` (the generation workers are this run's rollout
        workers): resize the generation group, give new workers the trainer's weights, form the broadcast group
        anew; ``scale/...`` metrics. ``env=N`` is refused with a warning (a text run has one env worker)."""
        try:
            request = take_scale_request(run_dir)
        except ConfigError as error:
            print(f"warning: {error}; ignored", file=sys.stderr, flush=True)
            return {}
        if request is None:
            return {}
        if "env" in request:
            print(f"warning: env={request['env']}: a text run has one env worker; ignored", file=sys.stderr,
                  flush=True)
        wanted = request.get("rollout")
        if wanted is None or wanted == len(self.generation):
            return {}
        started, before = time.perf_counter(), len(self.generation)
        added = self.generation.resize(wanted)
        weights = self.weights.full_weights()
        get_within([self.generation.workers[rank].load_weights.remote(weights) for rank in added],
                   self.config.fault.hang_timeout_s, f"new generation workers {added}' weights")
        if self.weights.formed:
            self.weights.reform(bool(added))
        print(f"scaled generation (rollout) workers {before} -> {wanted}", file=sys.stderr, flush=True)
        return {"scale/rollout_workers": wanted, "scale/seconds": time.perf_counter() - started,
                "scale/requested_at": request["requested_at"]}
