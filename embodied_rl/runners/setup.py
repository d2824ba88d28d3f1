"""Build the worker groups of an embodied run (env, rollout, actor) on a cluster, and sync weights."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import ray

import sim_envs
from embodied_rl.config.schema import TrainConfig, resolve_placement, slots_are_gpus
from embodied_rl.runtime import Channel, Cluster, WorkerGroup
from embodied_rl.runners.autoscale import env_step
from embodied_rl.runtime.channel import ChannelTimeout
from embodied_rl.runtime.deadlines import (DeadlineExceeded, HeartbeatWatch, WorkerStartError, get_within,
                                           wait_all_within)
from embodied_rl.workers.actor_worker import ActorWorker
from embodied_rl.workers.env_worker import EnvWorker
from embodied_rl.workers.messages import REQUESTS_KEY, ResendRequest, StopServing, responses_key
from embodied_rl.workers.rollout_worker import RolloutWorker


WEIGHTS_COLLECTIVE = "weights"

FAULT_COUNTERS = ("fault/env_workers_replaced", "fault/rollout_workers_replaced", "fault/trajectories_lost",
                  "fault/rounds_dropped", "fault/hung_workers_killed", "fault/stale_trajectories_dropped")
"""Cumulative counters of a run's worker faults (logged with every iteration's metrics). A hung worker killed is
also counted replaced; a stale trajectory dropped by the actor is one of another round than the one it was taken
for (e.g. of an env worker that died after sending it: that one is also counted lost)."""

HANG_TIMEOUT_S = 300.0
"""Default of ``fault.hang_timeout_s`` (see ``FaultConfig``) for worker sets built outside a training run."""

UPDATE_TIMEOUT_S = 3600.0
"""Default of ``fault.update_timeout_s``."""


BROADCAST_RECOVERY_S = 10.0
"""After a weight broadcast failed, how long its surviving members may take to finish before they count as stuck
in the broken collective (and are replaced too)."""


def _died(future) -> bool:
    """Whether the finished call behind ``future`` failed because its worker died."""
    try:
        ray.get(future)
        return False
    except ray.exceptions.RayActorError:
        return True
    except ray.exceptions.RayTaskError:
        return False


def _one_line(error) -> str:
    """``Type: first sentence`` of an error (Ray's errors run to paragraphs)."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text.split('. ')[0]}"[:300]


def grouped(config: TrainConfig) -> bool:
    """Whether the algorithm trains on groups of envs that run whole episodes in lock-step (GRPO)."""
    from embodied_rl.algorithms.embodied import ALGORITHMS

    return ALGORITHMS.get(config.algorithm.name).grouped_episodes


def action_chunk(config: TrainConfig) -> int:
    """Simulator steps per policy decision (``policy.options.action_chunk``, 1 without chunks)."""
    return int(config.policy.options.get("action_chunk", 1))


def policy_size(config: TrainConfig) -> dict:
    """``{"size": policy.size}`` for a policy with published sizes (see ``PolicyConfig.size``), else nothing."""
    from embodied_rl.models.registry import POLICIES

    return {"size": config.policy.size} if hasattr(POLICIES.get(config.policy.name), "sizes") else {}


def env_options(config: TrainConfig) -> dict:
    e = config.env
    options = dict(obs_mode=e.obs_mode, control_mode=e.control_mode, reward_mode=e.reward_mode,
                   max_episode_steps=e.max_episode_steps, reconfiguration_freq=e.reconfiguration_freq,
                   backend=e.backend)
    if e.obs_mode != "state":
        options["image_size"] = e.image_size
    if grouped(config) or e.ignore_terminations:
        options["ignore_terminations"] = True  # every env of a group runs to the time limit, in lock-step
    return options


def observation_spec(obs_shape) -> dict:
    """The policy's observation arguments from an env worker's ``observation_shape``: ``obs_dim`` D for state
    vectors ``[D]``; for dict observations (camera images) also ``obs_shapes``, each part's shape without the batch
    axis (e.g. ``{"rgb": [H, W, 3], "state": [D], "instruction": []}``), with ``obs_dim`` the state's D."""
    if isinstance(obs_shape, dict):
        shapes = {k: [int(d) for d in v] for k, v in obs_shape.items()}
        return dict(obs_dim=shapes["state"][0] if shapes.get("state") else 0, obs_shapes=shapes)
    return dict(obs_dim=int(obs_shape[0]))


MAX_WORKER_RESTARTS = 3
"""Replacements of one rank before the run gives up on it (a worker that dies every time is a bug, not bad luck)."""

REPLACEMENT_SEED_STRIDE = 1_000_003
"""A replacement env worker's seed moves by this much per incarnation: its episodes start from fresh states."""


def _new_worker_cpus(current: int, wanted: int) -> float | None:
    """CPUs that each worker added to a group declares to Ray: a share of what Ray has left, so that a worker
    added to a full cluster still starts (placement pins processes to cores; Ray's CPUs are bookkeeping here)."""
    if wanted <= current:
        return None
    share = float(ray.available_resources().get("CPU", 0.0)) / (wanted - current)
    return min(share, 1.0) if share >= 0.01 else 0.0  # Ray never schedules beyond its CPUs; zero always fits


class ScaleError(ValueError):
    """A resize request that cannot be carried out (e.g. it would split GRPO groups)."""


class ScaleRolledBack(ScaleError):
    """A resize whose new workers did not start (or did not take their layout) within the deadlines: undone, the
    run continues at its old sizes."""


@dataclass(frozen=True)
class SampledRound:
    """What the actor's update needs to know of a sampling round: its number, the env workers whose trajectories
    count in it, and whether it is dropped whole (a grouped round that lost a member)."""

    sampling_round: int
    env_ranks: tuple
    dropped: bool = False


class WorkerLostError(RuntimeError):
    """A worker died more often than ``MAX_WORKER_RESTARTS``; the run stops."""


@dataclass
class EmbodiedWorkers:
    channel: Channel
    env: WorkerGroup
    rollout: WorkerGroup
    actor: WorkerGroup | None
    policy_spec: dict
    placement: object
    last_serving: list | None = None  # each rollout worker's counters from its last ``serve``
    last_env_seconds: list = field(default_factory=list)  # each env worker's ``pop_seconds`` of the last round
    weights_synced: bool = False  # the rollout workers hold the actor's full weights (frozen ones included)
    pipeline_stages: int = 1
    grouped: bool = False  # GRPO-style groups span env workers: a round that lost one is dropped whole
    faults: dict = field(default_factory=lambda: dict.fromkeys(FAULT_COUNTERS, 0))
    trajectories_sent: int = 0  # trajectories the last ``sample`` put on the channel (its surviving env workers)
    round_dropped: bool = False  # the last ``sample`` lost an env worker of a grouped run: drop its trajectories
    restarts: dict = field(default_factory=dict)  # (group, rank) -> replacements so far
    broadcast_generation: int = 0  # the weight collective is re-formed after a rollout worker is replaced
    broadcast_formed: bool = False
    scale_generation: int = 0  # resizes of the env group so far (each gives every env worker fresh seeds)
    installed_weights: object = None  # reference to the (weights, version) last installed by ``install_weights``
    hang_timeout_s: float = HANG_TIMEOUT_S  # fault.hang_timeout_s: hung workers, and the deadline of short calls
    update_timeout_s: float = UPDATE_TIMEOUT_S  # fault.update_timeout_s
    sampling_round: int = 0  # sampling rounds started so far (the number the last round's trajectories carry)
    last_round: SampledRound | None = None
    env_steps_simulated: int = 0  # env steps of training rounds, from the env workers' own counters
    steps_seen: dict = field(default_factory=dict)  # env rank -> its ``steps_simulated`` when last read

    def sample(self, num_steps: int) -> list[dict]:
        """Every env worker runs ``num_steps`` steps served by the rollout workers; returns finished episodes.

        A worker that dies meanwhile (killed, crashed) is replaced: a dead env worker's trajectory of this round
        is lost (``fault/...`` counters; ``trajectories_sent`` counts the ones that reached the actor's channel),
        a dead rollout worker's requests are sent again to the others. Each env worker's seconds of simulating and
        waiting for actions in this round are in ``last_env_seconds`` (the rollout workers' in ``last_serving``)."""
        self.sampling_round += 1
        episodes, lost = self._served("interact", num_steps, self.sampling_round)
        self._read_env_counters()
        ranks = tuple(rank for rank in range(len(self.env)) if rank not in lost)
        self.trajectories_sent = len(ranks)
        self.round_dropped = bool(lost) and self.grouped
        self.last_round = SampledRound(self.sampling_round, ranks, self.round_dropped)
        self.faults["fault/trajectories_lost"] += len(lost)
        self.faults["fault/rounds_dropped"] += int(self.round_dropped)
        return episodes

    def start_update(self, progress: float = 0.0, sampled: SampledRound | None = None):
        """Start the actor's update on round ``sampled`` (default: the last one sampled) at ``progress`` of the run;
        returns its reference, for ``finish_update``."""
        sampled = sampled or self.last_round
        return self.actor.call("update", len(sampled.env_ranks), progress, sampled.dropped, sampled.sampling_round,
                               list(sampled.env_ranks))[0]

    def finish_update(self, update) -> dict:
        """The metrics of an update started by ``start_update``, within ``fault.update_timeout_s``."""
        metrics = get_within(update, self.update_timeout_s, "the actor's update (fault.update_timeout_s)")
        self.faults["fault/stale_trajectories_dropped"] = int(metrics.get("train/stale_trajectories_dropped", 0))
        return metrics

    def _read_env_counters(self) -> None:
        """After a round: each env worker's seconds of it (``last_env_seconds``) and the env steps it simulated
        (``env_steps_simulated``). A worker that died or hangs after the round is left out (its replacement, or
        the next round's watchdog, takes over)."""
        calls = [(worker.pop_seconds.remote(), worker.counters.remote()) for worker in self.env.workers]
        finished, _ = wait_all_within([ref for pair in calls for ref in pair], self.hang_timeout_s)
        done, seconds = set(finished), []
        for rank, (seconds_ref, counters_ref) in enumerate(calls):
            if seconds_ref not in done or counters_ref not in done:
                continue
            try:
                round_seconds, counters = ray.get([seconds_ref, counters_ref])
            except ray.exceptions.RayError:
                continue
            seconds.append(round_seconds)
            steps = int(counters["steps_simulated"])
            self.env_steps_simulated += steps - self.steps_seen.get(rank, 0)
            self.steps_seen[rank] = steps
        self.last_env_seconds = seconds

    def evaluate(self, num_episodes: int, deterministic: bool = True) -> list[dict]:
        """Full-length episodes with deterministic (or sampled) actions, ``num_episodes`` split over the env
        workers (fewer when one dies meanwhile)."""
        return self._served("evaluate", -(-num_episodes // len(self.env)), deterministic)[0]

    def _served(self, env_method: str, *arguments) -> tuple[list[dict], list[int]]:
        """Run ``env_method`` on every env worker while the rollout workers serve; returns the finished episodes
        and the ranks of env workers that died or hung (each already replaced).

        Every worker of the round is watched (``HeartbeatWatch``): one that neither answers its heartbeat nor
        progresses for ``hang_timeout_s`` is killed, and then replaced like a dead one."""
        watch = HeartbeatWatch(self.hang_timeout_s)
        serving = dict(enumerate(self.rollout.call("serve")))
        env_calls = dict(enumerate(self.env.call(env_method, *arguments)))
        for group, calls in ((self.rollout, serving), (self.env, env_calls)):
            for rank in calls:
                watch.watch((group.name, rank), group.workers[rank])
        results, lost_env, rollout_replaced, hung = {}, [], False, {}
        finished = False
        try:
            while env_calls:
                waiting = {**{f: ("env", r) for r, f in env_calls.items()},
                           **{f: ("rollout", r) for r, f in serving.items()}}
                ready, _ = ray.wait(list(waiting), num_returns=1, timeout=watch.wait_s())
                if watch.due():
                    for (group, rank), reason in watch.poll():
                        print(f"{group} worker {rank} is hung ({reason}; fault.hang_timeout_s="
                              f"{self.hang_timeout_s:g}); killing it", file=sys.stderr, flush=True)
                        hung[(group, rank)] = reason
                        self.faults["fault/hung_workers_killed"] += 1
                        ray.kill((self.env if group == "env" else self.rollout).workers[rank], no_restart=True)
                if not ready:
                    continue
                group, rank = waiting[ready[0]]
                if group == "env":
                    del env_calls[rank]
                    watch.forget(("env", rank))
                    try:
                        results[rank] = ray.get(ready[0])
                    except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as error:
                        lost_env.append(rank)
                        self._replace_env(rank, error, hung.pop(("env", rank), None))
                else:  # a rollout worker returned from serve before StopServing: it died (or was killed, hung)
                    del serving[rank]
                    self._replace_rollout(rank, ready[0], hung.pop(("rollout", rank), None))
                    rollout_replaced = True
                    serving[rank] = self.rollout.workers[rank].serve.remote()
                    watch.watch(("rollout", rank), self.rollout.workers[rank])
                    self._ask_env_workers_to_resend(sorted(env_calls))
            finished = True
        finally:
            # After a failure (a rank lost for good) only stop: the run is ending
            rollout_replaced |= self.stop_serving(serving, replace=finished)
        if rollout_replaced and self.broadcast_formed:
            self._reform_weight_broadcast()
        return [episode for rank in sorted(results) for episode in results[rank]], lost_env

    def _count_restart(self, group: str, rank: int, error) -> int:
        """Count a replacement of ``(group, rank)``; ``error``: what ended the worker (an error, or a line)."""
        restarts = self.restarts.get((group, rank), 0) + 1
        if restarts > MAX_WORKER_RESTARTS:
            last = error if isinstance(error, str) else _one_line(error)
            raise WorkerLostError(f"{group} worker {rank} died {restarts} times (at most {MAX_WORKER_RESTARTS} "
                                  f"replacements per worker); last error: {last}") from None
        self.restarts[(group, rank)] = restarts
        return restarts

    def _replace_env(self, rank: int, error, hung: str | None = None) -> None:
        """Replace env worker ``rank``, which died with ``error`` (or was killed because it hung: ``hung``)."""
        cause = f"hung ({hung})" if hung else f"died ({_one_line(error)})"
        incarnation = self._count_restart("env", rank, f"hung: {hung}" if hung else error)
        print(f"env worker {rank} {cause}; replacing it", file=sys.stderr, flush=True)
        seed = int(self.env.worker_kwargs["seed"])
        if not self.grouped:  # grouped resets keep the seed: group partners on other workers share states
            seed += REPLACEMENT_SEED_STRIDE * incarnation
        self.env.replace(rank, incarnation=incarnation, seed=seed)
        self.steps_seen[rank] = 0
        if self.grouped:  # the replacement continues its groups' sequence of shared initial states
            donor = self.env.workers[(rank + 1) % len(self.env)] if len(self.env) > 1 else None
            if donor is not None:
                progress = get_within(donor.group_progress.remote(), self.hang_timeout_s,
                                      f"env worker {(rank + 1) % len(self.env)}'s group progress")
                get_within(self.env.workers[rank].set_group_progress.remote(progress), self.hang_timeout_s,
                           f"env worker {rank}'s group progress")
        self.faults["fault/env_workers_replaced"] += 1

    def call_rollout(self, method: str, *args) -> list:
        """``method`` on every rollout worker, as ``rollout.run`` but a worker found dead is replaced (with the
        actor's weights) and the call repeated on its replacement."""
        results = []
        futures = self.rollout.call(method, *args)
        wait_all_within(futures, self.hang_timeout_s)
        for rank, future in enumerate(futures):
            what = f"rollout worker {rank}'s {method}"
            try:
                results.append(get_within(future, 0, what))
            except (ray.exceptions.RayActorError, DeadlineExceeded) as error:
                hung = str(error) if isinstance(error, DeadlineExceeded) else None
                self._replace_rollout(rank, error, hung)
                results.append(get_within(getattr(self.rollout.workers[rank], method).remote(*args),
                                          self.hang_timeout_s, what))
        return results

    def _replace_rollout(self, rank: int, failed, hung: str | None = None) -> None:
        """Replace rollout worker ``rank``; ``failed``: its error, or the reference of a ``serve`` that ended;
        ``hung``: why it was found hung (it is killed first)."""
        error = failed
        if isinstance(failed, ray.ObjectRef):
            try:
                ray.get(failed, timeout=0)
                error = RuntimeError("serve returned before it was told to stop")
            except Exception as raised:  # noqa: BLE001 - any death or crash is replaced the same way
                error = raised
        cause = f"hung ({hung})" if hung else f"died ({_one_line(error)})"
        self._count_restart("rollout", rank, f"hung: {hung}" if hung else error)
        print(f"rollout worker {rank} {cause}; replacing it", file=sys.stderr, flush=True)
        if self.actor is None and self.installed_weights is None:
            raise WorkerLostError(f"rollout worker {rank} {cause} and there are no weights to give a replacement")
        worker = self.rollout.replace(rank)
        get_within(worker.load_weights.remote(self._full_weights()), self.hang_timeout_s,
                   f"rollout worker {rank}'s weights (a replacement)")
        self.faults["fault/rollout_workers_replaced"] += 1

    def _full_weights(self):
        """Reference to ``(weights, version)`` for a new rollout worker: the actor's, frozen ones included (without
        an actor, as in ``embodied-rl eval``: the weights last installed)."""
        return self.actor.workers[0].get_weights.remote(False) if self.actor else self.installed_weights

    def _ask_env_workers_to_resend(self, ranks: list[int]) -> None:
        """A dead rollout worker took requests with it: each env worker still running resends its latest."""
        for rank in ranks:
            incarnation = self.restarts.get(("env", rank), 0)
            for stage in range(self.pipeline_stages):
                try:
                    self.channel.put(ResendRequest(), responses_key(rank, stage, incarnation), timeout=1.0)
                except ChannelTimeout:
                    pass  # that env worker died too; its own replacement handles it

    def resize(self, env_workers: int | None = None, rollout_workers: int | None = None) -> dict:
        """Between sampling rounds (nothing in flight): grow or shrink the env and rollout groups; returns
        ``scale/...`` metrics. New env workers and the ones kept all take fresh seed streams, disjoint across the
        new set; GRPO groups stay whole (the new env total must be a multiple of the group size) and every member
        continues the groups' sequence of shared states. New rollout workers get the actor's weights.

        New env and rollout workers construct at the same time, while the kept env workers take their new layout.
        A new worker that fails to construct, or does not within ``fault.start_timeout_s`` (or a layout or weights
        call that misses ``fault.hang_timeout_s``), rolls the resize back: ``ScaleRolledBack``, and the groups are
        as they were (a group already shrunk stays shrunk) and ready for the next round."""
        start = time.perf_counter()
        before = (len(self.env), len(self.rollout))
        grow_env = env_workers is not None and env_workers != len(self.env)
        grow_rollout = rollout_workers is not None and rollout_workers != len(self.rollout)
        if grow_env:
            per_worker = int(self.env.worker_kwargs["envs_per_worker"])
            group_size = self.env.worker_kwargs.get("group_size")
            if group_size and env_workers * per_worker % group_size:
                raise ScaleError(f"env={env_workers}: {env_workers * per_worker} envs do not form whole groups of "
                                 f"group_size={group_size}; allowed: a multiple of "
                                 f"{env_step(per_worker, group_size)} env workers")
        growths = {}
        try:
            layout = None
            if grow_env:
                for rank in range(env_workers, len(self.env)):
                    self.restarts.pop(("env", rank), None)
                    self.steps_seen.pop(rank, None)
                seed, total = self._next_env_layout(env_workers)
                growths["env"] = self.env.begin_resize(env_workers, _new_worker_cpus(len(self.env), env_workers),
                                                       seed=seed, total_envs=total)
                layout = self._start_env_layout(seed, total, ranks=range(min(before[0], env_workers)))
            if grow_rollout:
                for rank in range(rollout_workers, len(self.rollout)):
                    self.restarts.pop(("rollout", rank), None)
                growths["rollout"] = self.rollout.begin_resize(
                    rollout_workers, _new_worker_cpus(len(self.rollout), rollout_workers))
            if grow_env:
                added = self.env.finish_resize(growths["env"])
                self.steps_seen.update(dict.fromkeys(added, 0))
                self._finish_env_layout(layout, added)
            if grow_rollout:
                added = self.rollout.finish_resize(growths["rollout"])
                if added:
                    source = self._full_weights()
                    get_within([self.rollout.workers[rank].load_weights.remote(source) for rank in added],
                               self.hang_timeout_s, f"new rollout workers {added}' weights")
                if self.broadcast_formed:
                    self._reform_weight_broadcast(len(added) > 0)
        except (WorkerStartError, DeadlineExceeded, ray.exceptions.RayError) as error:
            self._roll_back(before, growths)
            raise ScaleRolledBack(f"{_one_line(error) if isinstance(error, ray.exceptions.RayError) else error}; "
                                  f"rolled back to env workers {len(self.env)}, rollout workers {len(self.rollout)}"
                                  ) from None
        return {"scale/env_workers": len(self.env), "scale/rollout_workers": len(self.rollout),
                "scale/resize_s": time.perf_counter() - start}

    def _next_env_layout(self, env_workers: int) -> tuple[int, int]:
        """``(seed, total envs)`` of the env group at ``env_workers`` workers: a fresh seed stream per resize."""
        self.scale_generation += 1
        seed = int(self.env.worker_kwargs["seed"]) + REPLACEMENT_SEED_STRIDE * (MAX_WORKER_RESTARTS + 1) \
            * self.scale_generation
        return seed, env_workers * int(self.env.worker_kwargs["envs_per_worker"])

    def _start_env_layout(self, seed: int, total: int, ranks) -> dict:
        """Give env workers ``ranks`` the layout ``(seed, total)`` (without waiting); for ``_finish_env_layout``."""
        group_size = self.env.worker_kwargs.get("group_size")
        progress = (get_within(self.env.workers[0].group_progress.remote(), self.hang_timeout_s,
                               "env worker 0's group progress") if group_size else None)
        return {"calls": self.env.call("relayout", seed, total, ranks=list(ranks)), "progress": progress}

    def _finish_env_layout(self, layout: dict, added: list[int]) -> None:
        get_within(layout["calls"], self.hang_timeout_s, "the env workers' new layout (relayout)")
        if layout["progress"] is not None:  # every member, new ones included, continues the groups' sequence
            get_within(self.env.call("set_group_progress", layout["progress"]), self.hang_timeout_s,
                       "the env workers' group progress")

    def _roll_back(self, before: tuple[int, int], growths: dict) -> None:
        """After a failed resize: undo growths still under way, shrink groups that grew back to their sizes
        ``before``, and lay the env workers out again for the size they end at."""
        for name, group in (("env", self.env), ("rollout", self.rollout)):
            if name in growths:
                group.abort_resize(growths[name])
        try:
            if len(self.rollout) > before[1]:
                self.rollout.resize(before[1])
            if "rollout" in growths and self.broadcast_formed:
                self._reform_weight_broadcast()
            if len(self.env) > before[0]:
                self.env.resize(before[0])
            if "env" in growths:
                for rank in range(len(self.env), before[0]):
                    self.steps_seen.pop(rank, None)
                seed, total = self._next_env_layout(len(self.env))
                self._finish_env_layout(self._start_env_layout(seed, total, range(len(self.env))), [])
                self.env.worker_kwargs.update(seed=seed, total_envs=total)
        except (WorkerStartError, DeadlineExceeded, ray.exceptions.RayError) as error:
            print(f"warning: rolling back a resize: {_one_line(error)}; a dead or hung worker is replaced in the "
                  f"next round", file=sys.stderr, flush=True)

    def stop_serving(self, serving, replace: bool = True) -> bool:
        """Tell the rollout workers to stop serving and collect each one's counters (``last_serving``) from
        ``serving`` (rank -> reference of its ``serve``). One that died meanwhile (also after the round's last env
        worker returned), or does not return within ``fault.hang_timeout_s``, is replaced (``replace``) or left
        out; returns whether one was replaced."""
        if not isinstance(serving, dict):
            serving = dict(enumerate(serving))
        self.channel.refresh()  # a replaced rollout worker's old inbox may still be cached
        try:  # to every reader: by load, two could reach one worker
            self.channel.put_to_every_reader(StopServing(), REQUESTS_KEY, timeout=self.hang_timeout_s)
        except ChannelTimeout:
            pass  # a reader that took nothing is stopped or wedged: it does not return from serve, below
        _, unfinished = wait_all_within(list(serving.values()), self.hang_timeout_s)
        counters, replaced = [], False
        for rank, future in sorted(serving.items()):
            hung = None
            if future in unfinished:
                hung = f"did not stop serving within {self.hang_timeout_s:g} s of being told to"
                print(f"rollout worker {rank} {hung}; killing it", file=sys.stderr, flush=True)
                ray.kill(self.rollout.workers[rank], no_restart=True)
                self.faults["fault/hung_workers_killed"] += 1
            else:
                try:
                    counters.append(ray.get(future))
                    continue
                except ray.exceptions.RayError:
                    pass
            if replace:
                self._replace_rollout(rank, future, hung)
                replaced = True
        self.last_serving = counters
        return replaced

    def _reform_weight_broadcast(self, new_members: bool = True) -> None:
        """A new collective for the actor and the current rollout workers (members that left or died are in the
        old one, which every survivor leaves)."""
        survivors = [self.actor.workers[0], *self.rollout.workers]
        get_within([worker.leave_collective.remote(self.weights_collective) for worker in survivors],
                   self.hang_timeout_s, f"leaving the weight collective {self.weights_collective!r}")
        self.broadcast_generation += 1
        self.form_weight_broadcast()
        if new_members:
            self.weights_synced = False  # a new member holds no frozen weights yet

    def shutdown(self) -> None:
        for group in (self.env, self.rollout, self.actor):
            if group is not None:
                group.kill()

    def form_weight_broadcast(self) -> None:
        """Make the actor (rank 0) and the rollout workers one collective group for weight broadcasts: NCCL when
        the actor computes on a GPU, gloo otherwise."""
        from embodied_rl.runtime.collective import form_collective

        device = get_within(self.actor.workers[0].device_name.remote(), self.hang_timeout_s, "the actor's device")
        form_collective(self.weights_collective, [self.actor.workers[0], *self.rollout.workers],
                        backend="nccl" if device.startswith("cuda") else "gloo")
        self.broadcast_formed = True

    @property
    def weights_collective(self) -> str:
        return f"{WEIGHTS_COLLECTIVE}:{self.broadcast_generation}"

    def broadcast_weights(self) -> int:
        """Actor -> every rollout worker through the collective group; returns the version they installed. After
        the first sync only trained weights travel (frozen ones, e.g. a LoRA base, are already in place)."""
        self._replace_dead_rollout_workers()
        only_trained = self.weights_synced
        sent = self.actor.call("broadcast_weights", self.weights_collective, only_trained)
        received = self.rollout.call("receive_weights", self.weights_collective, only_trained)
        try:
            versions = get_within(sent + received, self.update_timeout_s, "the weight broadcast")
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as error:
            self._recover_broadcast(sent[0], received, error)
            return self.broadcast_weights()  # on the new group
        if len(set(versions)) != 1:
            raise RuntimeError(f"weight broadcast left mixed policy versions {versions}")
        self.weights_synced = True
        return versions[0]

    def _replace_dead_rollout_workers(self) -> None:
        """Before a broadcast: a rollout worker that died since the last round (or does not answer within
        ``BROADCAST_RECOVERY_S``) would break the collective for all members (the live ones would wait in it until its
        timeout), so it is replaced and the group formed anew."""
        pings = [worker.process_id.remote() for worker in self.rollout.workers]
        _, unanswered = ray.wait(pings, num_returns=len(pings), timeout=BROADCAST_RECOVERY_S)
        lost = [rank for rank, ping in enumerate(pings) if ping in unanswered or _died(ping)]
        for rank in lost:
            if pings[rank] in unanswered:  # alive but not answering: it would hang the broadcast
                print(f"rollout worker {rank} did not answer in {BROADCAST_RECOVERY_S:.0f} s; replacing it",
                      file=sys.stderr, flush=True)
                ray.kill(self.rollout.workers[rank], no_restart=True)
            self._replace_rollout(rank, ray.exceptions.RayActorError())
        if lost:
            self._reform_weight_broadcast()

    def _recover_broadcast(self, sent, received: list, error) -> None:
        """A rollout worker died before or during a broadcast, which breaks the collective for every member: replace
        it (with the actor's weights), and also any member still stuck in the broken broadcast after
        ``BROADCAST_RECOVERY_S``; then form a new group. A dead actor, or a failure with no dead rollout worker,
        is raised."""
        _, pending = ray.wait([sent, *received], num_returns=len(received) + 1, timeout=BROADCAST_RECOVERY_S)
        if sent in pending or _died(sent):
            raise error
        dead = [rank for rank, future in enumerate(received) if future not in pending and _died(future)]
        if not dead:
            raise error
        stuck = [rank for rank, future in enumerate(received) if future in pending]
        for rank in stuck:
            print(f"rollout worker {rank} is stuck in the broken weight broadcast; replacing it", file=sys.stderr,
                  flush=True)
            ray.kill(self.rollout.workers[rank], no_restart=True)
        for rank in sorted(dead + stuck):
            self._replace_rollout(rank, error)
        self._reform_weight_broadcast()

    def publish_weights(self):
        """The actor's ``(weights, version)`` copied to the object store (host memory); returns its reference.
        After the first publication only trained weights travel (see ``broadcast_weights``)."""
        return self.actor.call("get_weights", self.weights_synced)[0]

    def install_weights(self, weights_ref) -> int:
        """Load published weights into every rollout worker; returns their policy version."""
        version = self.call_rollout("load_weights", weights_ref)[0]
        self.installed_weights = weights_ref
        self.weights_synced = True
        return version


def node_ids_for(config: TrainConfig, component: str) -> list[str] | None:
    """Ray node ids a component is pinned to by ``placement.nodes`` (None: anywhere)."""
    from embodied_rl.config import ConfigError

    wanted = config.placement.nodes.get(component)
    if not wanted:
        return None
    alive = [n for n in ray.nodes() if n["Alive"]]
    alive.sort(key=lambda n: (not n.get("IsHeadNode", False), n["NodeID"]))
    try:
        return [alive[int(i)]["NodeID"] for i in str(wanted).split(",")]
    except (ValueError, IndexError):
        raise ConfigError(f"placement.nodes.{component}={wanted!r}: this cluster has nodes "
                          f"0-{len(alive) - 1}") from None


def start_workers(config: TrainConfig, cluster: Cluster, with_actor: bool = True,
                  env_seed_offset: int = 0, cluster_share: float = 1.0) -> EmbodiedWorkers:
    """Env, rollout and (optionally) actor groups sharing one channel; ``cluster_share`` of the cluster's CPU
    slots is split evenly among them (several worker sets alive at once, as in benchmarks, take a share each).

    ``env_seed_offset`` moves the envs to fresh initial states (a resumed run without saved env states must not
    replay the first episodes).
    """
    # The task's registry entry, not its name: a task registered only in this process (even in __main__) reaches
    # the env workers, which never ran its decorator (Ray pickles the entry, a __main__ factory by value).
    task = sim_envs.get_task(config.task)
    channel = Channel.create("embodied", cluster, transport=config.channel_transport)
    num_workers = config.env.num_workers + config.rollout.num_workers + int(with_actor)
    cpus = max(cluster.total_cpus() * cluster_share / num_workers, 0.01)
    placement = resolve_placement(config)
    on_cpu = not slots_are_gpus(config)
    cores = lambda component: placement.slots[component] if on_cpu else None  # noqa: E731
    gpus = lambda component: None if on_cpu else placement.slots[component]  # noqa: E731
    fault = config.fault
    env = WorkerGroup(EnvWorker, "env", config.env.num_workers, cpus_per_worker=cpus, task=task,
                      start_timeout_s=fault.start_timeout_s, answer_timeout_s=2 * fault.hang_timeout_s,
                      put_timeout_s=fault.hang_timeout_s,
                      envs_per_worker=config.env.envs_per_worker, env_options=env_options(config),
                      channel=channel, seed=config.seed + env_seed_offset,
                      pipeline_stages=config.env.pipeline_stages, cpu_slots=cores("env"), gpu_slots=gpus("env"),
                      group_size=config.algorithm.group_size if grouped(config) else None,
                      total_envs=config.env.num_workers * config.env.envs_per_worker,
                      action_chunk=action_chunk(config), seeded_sampling=config.deterministic,
                      node_ids=node_ids_for(config, "env"))
    obs_shape, action_shape = get_within([env.workers[0].observation_shape.remote(),
                                          env.workers[0].action_shape.remote()], fault.hang_timeout_s,
                                         "env worker 0's observation and action shapes")
    policy_spec = dict(name=config.policy.name, action_dim=int(action_shape[0]),
                       hidden_sizes=list(config.policy.hidden_sizes), init_log_std=config.policy.init_log_std,
                       **observation_spec(obs_shape), **policy_size(config), **dict(config.policy.options))
    rollout = WorkerGroup(RolloutWorker, "rollout", config.rollout.num_workers, cpus_per_worker=cpus,
                          start_timeout_s=fault.start_timeout_s, policy=policy_spec, channel=channel, cpu_slots=cores("rollout"),
                          gpu_slots=gpus("rollout"), node_ids=node_ids_for(config, "rollout"))
    actor = None
    if with_actor:
        actor = WorkerGroup(ActorWorker, "actor", 1, cpus_per_worker=cpus, policy=policy_spec,
                            start_timeout_s=fault.start_timeout_s, trajectory_timeout_s=fault.hang_timeout_s,
                            algorithm=config.algorithm, channel=channel, seed=config.seed,
                            torch_threads=2, cpu_slots=cores("actor"), gpu_slots=gpus("actor"),
                            node_ids=node_ids_for(config, "actor"))
    return EmbodiedWorkers(channel, env, rollout, actor, policy_spec, placement,
                           pipeline_stages=config.env.pipeline_stages, grouped=grouped(config),
                           hang_timeout_s=fault.hang_timeout_s, update_timeout_s=fault.update_timeout_s)
