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
from embodied_rl.workers.actor_worker import ActorWorker
from embodied_rl.workers.env_worker import EnvWorker
from embodied_rl.workers.messages import REQUESTS_KEY, ResendRequest, StopServing, responses_key
from embodied_rl.workers.rollout_worker import RolloutWorker


WEIGHTS_COLLECTIVE = "weights"

FAULT_COUNTERS = ("fault/env_workers_replaced", "fault/rollout_workers_replaced", "fault/trajectories_lost",
                  "fault/rounds_dropped")
"""Cumulative counters of a run's worker faults (logged with every iteration's metrics)."""


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

    def sample(self, num_steps: int) -> list[dict]:
        """Every env worker runs ``num_steps`` steps served by the rollout workers; returns finished episodes.

        A worker that dies meanwhile (killed, crashed) is replaced: a dead env worker's trajectory of this round
        is lost (``fault/...`` counters; ``trajectories_sent`` counts the ones that reached the actor's channel),
        a dead rollout worker's requests are sent again to the others. Each env worker's seconds of simulating and
        waiting for actions in this round are in ``last_env_seconds`` (the rollout workers' in ``last_serving``)."""
        episodes, lost = self._served("interact", num_steps)
        self.last_env_seconds = self._pop_env_seconds()
        self.trajectories_sent = len(self.env) - len(lost)
        self.round_dropped = bool(lost) and self.grouped
        self.faults["fault/trajectories_lost"] += len(lost)
        self.faults["fault/rounds_dropped"] += int(self.round_dropped)
        return episodes

    def _pop_env_seconds(self) -> list[dict]:
        try:
            return ray.get(self.env.call("pop_seconds"))
        except ray.exceptions.RayActorError:  # died after the round: its replacement measures the next one
            return []

    def evaluate(self, num_episodes: int, deterministic: bool = True) -> list[dict]:
        """Full-length episodes with deterministic (or sampled) actions, ``num_episodes`` split over the env
        workers (fewer when one dies meanwhile)."""
        return self._served("evaluate", -(-num_episodes // len(self.env)), deterministic)[0]

    def _served(self, env_method: str, *arguments) -> tuple[list[dict], list[int]]:
        """Run ``env_method`` on every env worker while the rollout workers serve; returns the finished episodes
        and the ranks of env workers that died (each already replaced)."""
        serving = dict(enumerate(self.rollout.call("serve")))
        env_calls = dict(enumerate(self.env.call(env_method, *arguments)))
        results, lost_env, rollout_replaced = {}, [], False
        try:
            while env_calls:
                waiting = {**{f: ("env", r) for r, f in env_calls.items()},
                           **{f: ("rollout", r) for r, f in serving.items()}}
                ready, _ = ray.wait(list(waiting), num_returns=1)
                group, rank = waiting[ready[0]]
                if group == "env":
                    del env_calls[rank]
                    try:
                        results[rank] = ray.get(ready[0])
                    except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as error:
                        lost_env.append(rank)
                        self._replace_env(rank, error)
                else:  # a rollout worker returned from serve before StopServing: it died
                    del serving[rank]
                    self._replace_rollout(rank, ready[0])
                    rollout_replaced = True
                    serving[rank] = self.rollout.workers[rank].serve.remote()
                    self._ask_env_workers_to_resend(sorted(env_calls))
        finally:
            self.stop_serving(list(serving.values()))
        if rollout_replaced and self.broadcast_formed:
            self._reform_weight_broadcast()
        return [episode for rank in sorted(results) for episode in results[rank]], lost_env

    def _count_restart(self, group: str, rank: int, error) -> int:
        restarts = self.restarts.get((group, rank), 0) + 1
        if restarts > MAX_WORKER_RESTARTS:
            raise WorkerLostError(f"{group} worker {rank} died {restarts} times (at most {MAX_WORKER_RESTARTS} "
                                  f"replacements per worker); last error: {_one_line(error)}") from None
        self.restarts[(group, rank)] = restarts
        return restarts

    def _replace_env(self, rank: int, error) -> None:
        incarnation = self._count_restart("env", rank, error)
        print(f"env worker {rank} died ({_one_line(error)}); replacing it", file=sys.stderr, flush=True)
        seed = int(self.env.worker_kwargs["seed"])
        if not self.grouped:  # grouped resets keep the seed: group partners on other workers share states
            seed += REPLACEMENT_SEED_STRIDE * incarnation
        self.env.replace(rank, incarnation=incarnation, seed=seed)
        if self.grouped:  # the replacement continues its groups' sequence of shared initial states
            donor = self.env.workers[(rank + 1) % len(self.env)] if len(self.env) > 1 else None
            if donor is not None:
                progress = ray.get(donor.group_progress.remote())
                ray.get(self.env.workers[rank].set_group_progress.remote(progress))
        self.faults["fault/env_workers_replaced"] += 1

    def call_rollout(self, method: str, *args) -> list:
        """``method`` on every rollout worker, as ``rollout.run`` but a worker found dead is replaced (with the
        actor's weights) and the call repeated on its replacement."""
        results = []
        for rank, future in enumerate(self.rollout.call(method, *args)):
            try:
                results.append(ray.get(future))
            except ray.exceptions.RayActorError as error:
                self._replace_rollout(rank, error)
                results.append(ray.get(getattr(self.rollout.workers[rank], method).remote(*args)))
        return results

    def _replace_rollout(self, rank: int, failed) -> None:
        """Replace rollout worker ``rank``; ``failed``: its error, or the reference of a ``serve`` that ended."""
        error = failed
        if isinstance(failed, ray.ObjectRef):
            try:
                ray.get(failed)
                error = RuntimeError("serve returned before it was told to stop")
            except Exception as raised:  # noqa: BLE001 - any death or crash is replaced the same way
                error = raised
        self._count_restart("rollout", rank, error)
        print(f"rollout worker {rank} died ({_one_line(error)}); replacing it", file=sys.stderr, flush=True)
        if self.actor is None and self.installed_weights is None:
            raise WorkerLostError(f"rollout worker {rank} died and there are no weights to give a replacement: "
                                  f"{_one_line(error)}")
        worker = self.rollout.replace(rank)
        ray.get(worker.load_weights.remote(self._full_weights()))
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
        continues the groups' sequence of shared states. New rollout workers get the actor's weights."""
        start = time.perf_counter()
        if env_workers is not None and env_workers != len(self.env):
            per_worker = int(self.env.worker_kwargs["envs_per_worker"])
            total = env_workers * per_worker
            group_size = self.env.worker_kwargs.get("group_size")
            if group_size and total % group_size:
                raise ScaleError(f"env={env_workers}: {total} envs do not form whole groups of "
                                 f"group_size={group_size}; allowed: a multiple of "
                                 f"{env_step(per_worker, group_size)} env workers")
            progress = ray.get(self.env.workers[0].group_progress.remote()) if group_size else None
            self.scale_generation += 1
            seed = int(self.env.worker_kwargs["seed"]) + REPLACEMENT_SEED_STRIDE * (MAX_WORKER_RESTARTS + 1) \
                * self.scale_generation
            for rank in range(env_workers, len(self.env)):
                self.restarts.pop(("env", rank), None)
            self.env.resize(env_workers, _new_worker_cpus(len(self.env), env_workers), seed=seed, total_envs=total)
            ray.get(self.env.call("relayout", seed, total))
            if progress is not None:
                ray.get(self.env.call("set_group_progress", progress))
        if rollout_workers is not None and rollout_workers != len(self.rollout):
            for rank in range(rollout_workers, len(self.rollout)):
                self.restarts.pop(("rollout", rank), None)
            added = self.rollout.resize(rollout_workers, _new_worker_cpus(len(self.rollout), rollout_workers))
            if added:
                source = self._full_weights()
                ray.get([self.rollout.workers[rank].load_weights.remote(source) for rank in added])
            if self.broadcast_formed:
                self._reform_weight_broadcast(len(added) > 0)
        return {"scale/env_workers": len(self.env), "scale/rollout_workers": len(self.rollout),
                "scale/resize_s": time.perf_counter() - start}

    def stop_serving(self, serving: list) -> None:
        self.channel.refresh()  # a replaced rollout worker's old inbox may still be cached
        self.channel.put_to_every_reader(StopServing(), REQUESTS_KEY)  # by load, two could reach one worker
        self.last_serving = ray.get(serving)

    def _reform_weight_broadcast(self, new_members: bool = True) -> None:
        """A new collective for the actor and the current rollout workers (members that left or died are in the
        old one, which every survivor leaves)."""
        survivors = [self.actor.workers[0], *self.rollout.workers]
        ray.get([worker.leave_collective.remote(self.weights_collective) for worker in survivors])
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

        device = ray.get(self.actor.workers[0].device_name.remote())
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
            versions = ray.get(sent + received)
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
    env = WorkerGroup(EnvWorker, "env", config.env.num_workers, cpus_per_worker=cpus, task=task,
                      envs_per_worker=config.env.envs_per_worker, env_options=env_options(config),
                      channel=channel, seed=config.seed + env_seed_offset,
                      pipeline_stages=config.env.pipeline_stages, cpu_slots=cores("env"), gpu_slots=gpus("env"),
                      group_size=config.algorithm.group_size if grouped(config) else None,
                      total_envs=config.env.num_workers * config.env.envs_per_worker,
                      action_chunk=action_chunk(config), seeded_sampling=config.deterministic,
                      node_ids=node_ids_for(config, "env"))
    obs_shape, action_shape = ray.get([env.workers[0].observation_shape.remote(),
                                       env.workers[0].action_shape.remote()])
    policy_spec = dict(name=config.policy.name, action_dim=int(action_shape[0]),
                       hidden_sizes=list(config.policy.hidden_sizes), init_log_std=config.policy.init_log_std,
                       **observation_spec(obs_shape), **policy_size(config), **dict(config.policy.options))
    rollout = WorkerGroup(RolloutWorker, "rollout", config.rollout.num_workers, cpus_per_worker=cpus,
                          policy=policy_spec, channel=channel, cpu_slots=cores("rollout"),
                          gpu_slots=gpus("rollout"), node_ids=node_ids_for(config, "rollout"))
    actor = None
    if with_actor:
        actor = WorkerGroup(ActorWorker, "actor", 1, cpus_per_worker=cpus, policy=policy_spec,
                            algorithm=config.algorithm, channel=channel, seed=config.seed,
                            torch_threads=2, cpu_slots=cores("actor"), gpu_slots=gpus("actor"),
                            node_ids=node_ids_for(config, "actor"))
    return EmbodiedWorkers(channel, env, rollout, actor, policy_spec, placement,
                           pipeline_stages=config.env.pipeline_stages, grouped=grouped(config))
