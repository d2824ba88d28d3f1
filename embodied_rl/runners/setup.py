"""Build the worker groups of an embodied run (env, rollout, actor) on a cluster and run their sampling rounds: hung
or dead workers replaced, every wait with a deadline (weight sync in weight_sync.py, resizes in resize.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import ray

import sim_envs
from embodied_rl.algorithms.embodied import algorithm_needs
from embodied_rl.config.schema import TrainConfig, resolve_placement, slots_are_gpus
from embodied_rl.runtime import Channel, Cluster, WorkerGroup
from embodied_rl.runtime.worker import Prestarted
from embodied_rl.runtime.channel import ChannelTimeout
from embodied_rl.runners.resize import (MAX_WORKER_RESTARTS, REPLACEMENT_SEED_STRIDE, Resizing,  # noqa: F401
                                        ScaleError, ScaleRolledBack)
from embodied_rl.runners.weight_sync import WeightSync, get_failing_fast
from embodied_rl.runtime.deadlines import DeadlineExceeded, HeartbeatWatch, get_within, one_line, wait_all_within
from embodied_rl.workers.actor_worker import ActorWorker
from embodied_rl.workers.env_worker import EnvWorker
from embodied_rl.workers.messages import REQUESTS_KEY, ResendRequest, StopServing, responses_key
from embodied_rl.workers.rollout_worker import RolloutWorker


FAULT_COUNTERS = ("fault/env_workers_replaced", "fault/rollout_workers_replaced", "fault/trajectories_lost",
                  "fault/rounds_dropped", "fault/hung_workers_killed", "fault/stale_trajectories_dropped")
"""Cumulative counters of a run's worker faults (logged with every iteration's metrics). A hung worker killed is
also counted replaced; a stale trajectory dropped by the actor is one of another round than the one it was taken
for (e.g. of an env worker that died after sending it: that one is also counted lost)."""

HANG_TIMEOUT_S = 300.0
"""Default of ``fault.hang_timeout_s`` (see ``FaultConfig``) for worker sets built outside a training run."""

UPDATE_TIMEOUT_S = 3600.0
"""Default of ``fault.update_timeout_s``."""


def grouped(config: TrainConfig) -> bool:
    """Whether the algorithm trains on groups of envs that run whole episodes in lock-step (the GRPO family)."""
    return algorithm_needs(config.algorithm).groups


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
    if e.kwargs:
        options["kwargs"] = dict(e.kwargs)  # only families that take constructor keywords accept the key
    return options


def observation_spec(obs_shape) -> dict:
    """The policy's observation arguments from an env worker's ``observation_shape``: ``obs_dim`` D for state
    vectors ``[D]``; for dict observations (camera images) also ``obs_shapes``, each part's shape without the batch
    axis (e.g. ``{"rgb": [H, W, 3], "state": [D], "instruction": []}``), with ``obs_dim`` the state's D."""
    if isinstance(obs_shape, dict):
        shapes = {k: [int(d) for d in v] for k, v in obs_shape.items()}
        return dict(obs_dim=shapes["state"][0] if shapes.get("state") else 0, obs_shapes=shapes)
    return dict(obs_dim=int(obs_shape[0]))


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
class EmbodiedWorkers(Resizing):
    channel: Channel
    env: WorkerGroup
    rollout: WorkerGroup
    actor: WorkerGroup | None
    policy_spec: dict
    placement: object
    last_serving: list | None = None  # each rollout worker's counters from its last ``serve``
    last_env_seconds: list = field(default_factory=list)  # each env worker's ``pop_seconds`` of the last round
    pipeline_stages: int = 1
    grouped: bool = False  # GRPO-style groups span env workers: a round that lost one is dropped whole
    inline: bool = False  # rollout.inline: the env workers hold the policy; ``rollout`` is the env group itself
    faults: dict = field(default_factory=lambda: dict.fromkeys(FAULT_COUNTERS, 0))
    trajectories_sent: int = 0  # trajectories the last ``sample`` put on the channel (its surviving env workers)
    round_dropped: bool = False  # the last ``sample`` lost an env worker of a grouped run: drop its trajectories
    restarts: dict = field(default_factory=dict)  # (group, rank) -> replacements so far
    scale_generation: int = 0  # resizes of the env group so far (each gives every env worker fresh seeds)
    hang_timeout_s: float = HANG_TIMEOUT_S  # fault.hang_timeout_s: hung workers, and the deadline of short calls
    update_timeout_s: float = UPDATE_TIMEOUT_S  # fault.update_timeout_s
    sampling_round: int = 0  # sampling rounds started so far (the number the last round's trajectories carry)
    last_round: SampledRound | None = None
    env_steps_simulated: int = 0  # env steps of training rounds, from the env workers' own counters
    steps_seen: dict = field(default_factory=dict)  # env rank -> its ``steps_simulated`` when last read

    rendezvous: object = None  # a sharded actor's rendezvous store (``sharded_actor_rendezvous``)

    weights: WeightSync = field(init=False)  # the actor's weights to the rollout workers

    def __post_init__(self):
        self.weights = WeightSync(self.actor, self.rollout, self._replace_sampler, self.call_rollout,
                                  self.hang_timeout_s, self.update_timeout_s)

    def _replace_sampler(self, rank: int, failed, hung: str | None = None) -> None:
        """Replace sampler ``rank`` (a rollout worker, or with inline policies an env worker) with the weights."""
        (self._replace_env if self.inline else self._replace_rollout)(rank, failed, hung)

    def start_serving(self) -> dict:
        """``serve`` on every rollout worker: rank -> its reference, for ``stop_serving`` ({} with inline
        policies: nothing serves)."""
        return {} if self.inline else dict(enumerate(self.rollout.call("serve")))

    # Weight sync, by ``weights``: the names the runner, the turns and the benches use.
    def form_weight_broadcast(self) -> None:
        self.weights.form()

    def broadcast_weights(self) -> int:
        return self.weights.broadcast()

    def publish_weights(self):
        return self.weights.publish()

    def install_weights(self, weights_ref) -> int:
        return self.weights.install(weights_ref)

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
        returns its references (one per actor rank), for ``finish_update``."""
        sampled = sampled or self.last_round
        return self.actor.call("update", len(sampled.env_ranks), progress, sampled.dropped, sampled.sampling_round,
                               list(sampled.env_ranks))

    def finish_update(self, update: list) -> dict:
        """The metrics of an update started by ``start_update`` (rank 0's), within ``fault.update_timeout_s``; the
        first failure of any rank is raised as it happens."""
        metrics = actor_result(update, self.update_timeout_s, "the actor's update (fault.update_timeout_s)")
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
                round_seconds, counters = get_within([seconds_ref, counters_ref], self.hang_timeout_s,
                                                     f"env worker {rank}'s round counters")
            except (ray.exceptions.RayError, DeadlineExceeded):
                continue
            seconds.append(round_seconds)
            steps = int(counters["steps_simulated"])
            self.env_steps_simulated += steps - self.steps_seen.get(rank, 0)
            self.steps_seen[rank] = steps
        self.last_env_seconds = seconds

    def evaluate(self, state_ids: list[int], deterministic: bool = True,
                 max_episode_steps: int | None = None, split: str | None = None) -> list[dict]:
        """One full-length episode from each initial state of ``state_ids`` (split over the env workers) with
        deterministic (or sampled) actions, ordered by state; the states of an env worker that dies meanwhile are
        missing. ``max_episode_steps``: the episodes' time limit (None: the training envs'); ``split``: an
        out-of-distribution split of the task (None: in distribution)."""
        episodes = self._served("evaluate", list(state_ids), len(self.env), deterministic, max_episode_steps,
                                split)[0]
        return sorted(episodes, key=lambda e: e["state_id"])

    def _served(self, env_method: str, *arguments) -> tuple[list[dict], list[int]]:
        """Run ``env_method`` on every env worker while the rollout workers serve; returns the finished episodes
        and the ranks of env workers that died or hung (each already replaced).

        Every worker of the round is watched (``HeartbeatWatch``): one that neither answers its heartbeat nor
        progresses for ``hang_timeout_s`` is killed, and then replaced like a dead one. The actor is probed at
        every poll: its death ends the round at once (``RayActorError``; the env workers' trajectories could only
        wait for it until their put deadline), and the run with it."""
        watch = HeartbeatWatch(self.hang_timeout_s)
        probe = None  # a call on the actor: it fails as soon as the actor dies
        serving = self.start_serving()
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
                if probe is not None:
                    waiting[probe] = ("actor", 0)
                ready, _ = ray.wait(list(waiting), num_returns=1, timeout=watch.wait_s())
                if ready and waiting[ready[0]][0] == "actor":
                    get_within(probe, self.hang_timeout_s, "the actor's liveness probe")  # raises if it died
                    probe = None
                    ready = []
                if watch.due():
                    if probe is None and self.actor is not None:
                        probe = self.actor.workers[0].__ray_ready__.remote()
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
        if (rollout_replaced or self.inline and lost_env) and self.weights.formed:
            self.weights.reform()
        return [episode for rank in sorted(results) for episode in results[rank]], lost_env

    def _count_restart(self, group: str, rank: int, error) -> int:
        """Count a replacement of ``(group, rank)``; ``error``: what ended the worker (an error, or a line)."""
        restarts = self.restarts.get((group, rank), 0) + 1
        if restarts > MAX_WORKER_RESTARTS:
            last = error if isinstance(error, str) else one_line(error)
            raise WorkerLostError(f"{group} worker {rank} died {restarts} times (at most {MAX_WORKER_RESTARTS} "
                                  f"replacements per worker); last error: {last}") from None
        self.restarts[(group, rank)] = restarts
        return restarts

    def _replace_env(self, rank: int, error, hung: str | None = None) -> None:
        """Replace env worker ``rank``, which died with ``error`` (or was killed because it hung: ``hung``)."""
        cause = f"hung ({hung})" if hung else f"died ({one_line(error)})"
        incarnation = self._count_restart("env", rank, f"hung: {hung}" if hung else error)
        print(f"env worker {rank} {cause}; replacing it", file=sys.stderr, flush=True)
        seed = int(self.env.worker_kwargs["seed"])
        if not self.grouped:  # grouped resets keep the seed: group partners on other workers share states
            seed += REPLACEMENT_SEED_STRIDE * incarnation
        if self.inline and self.actor is None and self.weights.installed is None:
            raise WorkerLostError(f"env worker {rank} {cause} and there are no weights to give a replacement")
        self.env.replace(rank, incarnation=incarnation, seed=seed)
        self.steps_seen[rank] = 0
        if self.inline:  # its inline policy starts from the trainer's weights (the caller forms the group anew)
            get_within(self.env.workers[rank].load_weights.remote(self.weights.full_weights()),
                       self.hang_timeout_s, f"env worker {rank}'s weights (a replacement)")
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
                self._replace_sampler(rank, error, hung)
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
        cause = f"hung ({hung})" if hung else f"died ({one_line(error)})"
        self._count_restart("rollout", rank, f"hung: {hung}" if hung else error)
        print(f"rollout worker {rank} {cause}; replacing it", file=sys.stderr, flush=True)
        if self.actor is None and self.weights.installed is None:
            raise WorkerLostError(f"rollout worker {rank} {cause} and there are no weights to give a replacement")
        worker = self.rollout.replace(rank)
        get_within(worker.load_weights.remote(self.weights.full_weights()), self.hang_timeout_s,
                   f"rollout worker {rank}'s weights (a replacement)")
        self.faults["fault/rollout_workers_replaced"] += 1

    def _ask_env_workers_to_resend(self, ranks: list[int]) -> None:
        """A dead rollout worker took requests with it: each env worker still running resends its latest."""
        for rank in ranks:
            incarnation = self.restarts.get(("env", rank), 0)
            for stage in range(self.pipeline_stages):
                try:
                    self.channel.put(ResendRequest(), responses_key(rank, stage, incarnation), timeout=1.0)
                except ChannelTimeout:
                    pass  # that env worker died too; its own replacement handles it

    def stop_serving(self, serving, replace: bool = True) -> bool:
        """Tell the rollout workers to stop serving and collect each one's counters (``last_serving``) from
        ``serving`` (rank -> reference of its ``serve``). One that died meanwhile (also after the round's last env
        worker returned), or does not return within ``fault.hang_timeout_s``, is replaced (``replace``) or left
        out; returns whether one was replaced."""
        if self.inline:
            return False
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
                    counters.append(get_within(future, self.hang_timeout_s,
                                               f"rollout worker {rank}'s serving counters"))
                    continue
                except (ray.exceptions.RayError, DeadlineExceeded):
                    pass
            if replace:
                self._replace_rollout(rank, future, hung)
                replaced = True
        self.last_serving = counters
        return replaced

    def shutdown(self) -> None:
        for group in (self.env, None if self.inline else self.rollout, self.actor):
            if group is not None:
                group.kill()

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


def cpus_per_worker(counts: dict[str, int], pinned_to: dict[str, list[str] | None], node_cpus: dict[str, float],
                    cluster_share: float = 1.0) -> float:
    """Ray CPU slots each worker asks for: an even split of ``cluster_share`` of the cluster, lowered where
    ``placement.nodes`` pins workers so that every node's pinned workers fit on it (an unpinned worker may land
    on any node, so it counts against each). Rank ``r`` of a group pinned to ``[n0, n1, ...]`` goes to
    ``n[r % len]``, as ``WorkerGroup`` places it.

    ``counts``: workers per component; ``pinned_to``: component -> node ids or None; ``node_cpus``: node id ->
    CPU slots. Asking for more than a node has leaves the worker unplaced until the start deadline.
    """
    share = sum(node_cpus.values()) * cluster_share / max(sum(counts.values()), 1)
    per_node: dict[str, int] = {}
    unpinned = 0
    for component, count in counts.items():
        nodes = pinned_to.get(component)
        if not nodes:
            unpinned += count
            continue
        for rank in range(count):
            per_node[nodes[rank % len(nodes)]] = per_node.get(nodes[rank % len(nodes)], 0) + 1
    for node, pinned in per_node.items():
        share = min(share, node_cpus.get(node, 0.0) * cluster_share / (pinned + unpinned))
    return max(share, 0.01)


def actor_torch_threads(config: TrainConfig) -> int:
    """Intra-op threads of the actor: 2 for the on-policy learners' few large minibatches; 1 for the off-policy
    learners' hundreds of small gradient steps per round, where two threads spin against each other whenever the
    other core is busy (SAC's steps ran ~1 s each instead of ~0.03 s beside the env workers on 2 cores);
    ``placement.actor_threads`` when set."""
    if config.placement.actor_threads is not None:
        return config.placement.actor_threads
    return 1 if algorithm_needs(config.algorithm).replay else 2


def start_workers(config: TrainConfig, cluster: Cluster, with_actor: bool = True,
                  env_seed_offset: int = 0, cluster_share: float = 1.0,
                  standby_workers: int | None = None) -> EmbodiedWorkers:
    """Env, rollout and (optionally) actor groups sharing one channel; ``cluster_share`` of the cluster's CPU
    slots is split evenly among them (several worker sets alive at once, as in benchmarks, take a share each).

    ``standby_workers``: processes kept started beside the env and rollout groups each (``WorkerGroup``), so a
    worker added or replaced skips process start-up and imports; None: one each when ``autoscale.enabled``.

    ``env_seed_offset`` moves the envs to fresh initial states (a resumed run without saved env states must not
    replay the first episodes).
    """
    # The task's registry entry, not its name: a task registered only in this process (even in __main__) reaches
    # the env workers, which never ran its decorator (Ray pickles the entry, a __main__ factory by value).
    task = sim_envs.get_task(config.task)
    channel = Channel.create("embodied", cluster, transport=config.channel_transport)
    actor_ranks = config.actor.world_size if with_actor else 0
    rollout_ranks = 0 if config.rollout.inline else config.rollout.num_workers  # inline: the env workers infer
    counts = {"env": config.env.num_workers, "rollout": rollout_ranks, "actor": actor_ranks}
    cpus = cpus_per_worker(counts, {component: node_ids_for(config, component) for component in counts},
                           cluster.node_cpus(), cluster_share)
    placement = resolve_placement(config)
    on_cpu = not slots_are_gpus(config)
    cores = lambda component: placement.slots[component] if on_cpu else None  # noqa: E731
    gpus = lambda component: None if on_cpu else placement.slots[component]  # noqa: E731
    fault = config.fault
    standby = int(config.autoscale.enabled) if standby_workers is None else standby_workers
    # The rollout and actor processes start (and import torch) while the env workers build their simulators,
    # whose shapes the policy needs (a tiny run on a loaded 2-core machine: 25-27 s of start-up before, 17-21 s after).
    early = {}
    if rollout_ranks:
        early["rollout"] = Prestarted(RolloutWorker, rollout_ranks, cpus, node_ids_for(config, "rollout"))
    if with_actor:
        early["actor"] = Prestarted(ActorWorker, actor_ranks, cpus, node_ids_for(config, "actor"))
    try:
        return _start_groups(config, task, channel, cpus, placement, cores, gpus, standby, early, env_seed_offset)
    except BaseException:
        for processes in early.values():
            processes.kill()
        raise


def _start_groups(config: TrainConfig, task, channel: Channel, cpus: float, placement, cores, gpus, standby: int,
                  early: dict[str, Prestarted], env_seed_offset: int) -> EmbodiedWorkers:
    """``start_workers``' groups, in the processes ``early`` started for rollout and actor."""
    fault, with_actor = config.fault, "actor" in early
    env = WorkerGroup(EnvWorker, "env", config.env.num_workers, cpus_per_worker=cpus, task=task, standby=standby,
                      start_timeout_s=fault.start_timeout_s, answer_timeout_s=3 * fault.hang_timeout_s,
                      put_timeout_s=fault.hang_timeout_s,
                      envs_per_worker=config.env.envs_per_worker, env_options=env_options(config),
                      channel=channel, seed=config.seed + env_seed_offset,
                      pipeline_stages=config.env.pipeline_stages, cpu_slots=cores("env"), gpu_slots=gpus("env"),
                      group_size=config.algorithm.group_size if grouped(config) else None,
                      total_envs=config.env.num_workers * config.env.envs_per_worker,
                      action_chunk=action_chunk(config), seeded_sampling=config.deterministic,
                      store_next_obs=algorithm_needs(config.algorithm).replay,
                      node_ids=node_ids_for(config, "env"))
    obs_shape, action_shape = get_within([env.workers[0].observation_shape.remote(),
                                          env.workers[0].action_shape.remote()], fault.hang_timeout_s,
                                         "env worker 0's observation and action shapes")
    policy_spec = dict(name=config.policy.name, action_dim=int(action_shape[0]),
                       hidden_sizes=list(config.policy.hidden_sizes), init_log_std=config.policy.init_log_std,
                       **observation_spec(obs_shape), **policy_size(config), **dict(config.policy.options))
    if config.rollout.inline:  # the env workers answer their own requests: they are the rollout group
        get_within(env.call("hold_policy", policy_spec), fault.start_timeout_s, "the env workers' inline policies")
        env.worker_kwargs["policy"] = policy_spec  # replacements and new workers hold it from their start
        rollout = env
    else:
        rollout = WorkerGroup(RolloutWorker, "rollout", config.rollout.num_workers, cpus_per_worker=cpus,
                              start_timeout_s=fault.start_timeout_s, standby=standby, prestarted=early["rollout"],
                              policy=policy_spec, channel=channel, cpu_slots=cores("rollout"),
                              gpu_slots=gpus("rollout"), node_ids=node_ids_for(config, "rollout"))
    actor = None
    if with_actor:
        rendezvous, parallel = sharded_actor_rendezvous(config)
        actor = WorkerGroup(ActorWorker, "actor", config.actor.world_size, cpus_per_worker=cpus, policy=policy_spec,
                            prestarted=early["actor"], data_parallel=parallel,
                            start_timeout_s=fault.start_timeout_s, trajectory_timeout_s=fault.hang_timeout_s,
                            algorithm=config.algorithm, channel=channel, seed=config.seed,
                            micro_batch_size=config.actor.micro_batch_size,
                            activation_checkpointing=config.actor.activation_checkpointing,
                            torch_threads=actor_torch_threads(config), cpu_slots=cores("actor"),
                            gpu_slots=gpus("actor"),
                            node_ids=node_ids_for(config, "actor"))
    workers = EmbodiedWorkers(channel, env, rollout, actor, policy_spec, placement,
                              pipeline_stages=config.env.pipeline_stages, grouped=grouped(config),
                              inline=config.rollout.inline,
                              hang_timeout_s=fault.hang_timeout_s, update_timeout_s=fault.update_timeout_s)
    if with_actor:
        workers.rendezvous = rendezvous  # the sharded actor's store lives as long as its ranks
    return workers


def actor_result(futures: list, timeout_s: float, what: str):
    """Rank 0's result of a call on every actor rank (a sharded actor's calls are collective), raising the first
    failure of any rank at once: the others would otherwise wait in a collective until its timeout."""
    return get_failing_fast(futures, timeout_s, what)[0]


def sharded_actor_rendezvous(config: TrainConfig) -> tuple[object | None, dict | None]:
    """``(store, data_parallel)`` of a sharded actor (``actor.backend=fsdp``): a rendezvous store served by the
    driver (at its node's address on a joined cluster, which ranks on other nodes reach) and the ranks'
    ``data_parallel`` settings, its collectives bounded by ``fault.update_timeout_s``; ``(None, None)`` for one
    process."""
    if config.actor.backend == "single":
        return None, None
    from embodied_rl.engines.training.data_parallel import serve_rendezvous

    host = ray.util.get_node_ip_address() if config.cluster.address else "127.0.0.1"
    store = serve_rendezvous(host, config.fault.update_timeout_s)
    return store, {"backend": config.actor.backend, "master_address": host, "master_port": store.port,
                   "served_store": True, "timeout_s": config.fault.update_timeout_s}
