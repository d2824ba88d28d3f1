"""Build the worker groups of an embodied run (env, rollout, actor) on a cluster, and sync weights."""

from __future__ import annotations

from dataclasses import dataclass

import ray

import sim_envs
from embodied_rl.config.schema import TrainConfig, resolve_placement, slots_are_gpus
from embodied_rl.runtime import Channel, Cluster, WorkerGroup
from embodied_rl.workers.actor_worker import ActorWorker
from embodied_rl.workers.env_worker import EnvWorker
from embodied_rl.workers.messages import REQUESTS_KEY, StopServing
from embodied_rl.workers.rollout_worker import RolloutWorker


WEIGHTS_COLLECTIVE = "weights"


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


@dataclass
class EmbodiedWorkers:
    channel: Channel
    env: WorkerGroup
    rollout: WorkerGroup
    actor: WorkerGroup | None
    policy_spec: dict
    placement: object
    last_serving: list | None = None  # each rollout worker's counters from its last ``serve``
    weights_synced: bool = False  # the rollout workers hold the actor's full weights (frozen ones included)

    def sample(self, num_steps: int) -> list[dict]:
        """Every env worker runs ``num_steps`` steps served by the rollout workers; returns finished episodes."""
        return self._served("interact", num_steps)

    def evaluate(self, num_episodes: int, deterministic: bool = True) -> list[dict]:
        """Full-length episodes with deterministic (or sampled) actions, ``num_episodes`` split over the env
        workers."""
        return self._served("evaluate", -(-num_episodes // len(self.env)), deterministic)

    def _served(self, env_method: str, *arguments) -> list[dict]:
        serving = self.rollout.call("serve")
        try:
            per_worker = ray.get(self.env.call(env_method, *arguments))
        finally:
            self.stop_serving(serving)
        return [episode for episodes in per_worker for episode in episodes]

    def stop_serving(self, serving: list) -> None:
        self.channel.put_to_every_reader(StopServing(), REQUESTS_KEY)  # by load, two could reach one worker
        self.last_serving = ray.get(serving)

    def shutdown(self) -> None:
        for group in (self.env, self.rollout, self.actor):
            if group is not None:
                group.kill()

    def form_weight_broadcast(self) -> None:
        """Make the actor (rank 0) and the rollout workers one collective group for weight broadcasts: NCCL when
        the actor computes on a GPU, gloo otherwise."""
        from embodied_rl.runtime.collective import form_collective

        device = ray.get(self.actor.workers[0].device_name.remote())
        form_collective(WEIGHTS_COLLECTIVE, [self.actor.workers[0], *self.rollout.workers],
                        backend="nccl" if device.startswith("cuda") else "gloo")

    def broadcast_weights(self) -> int:
        """Actor -> every rollout worker through the collective group; returns the version they installed. After
        the first sync only trained weights travel (frozen ones, e.g. a LoRA base, are already in place)."""
        only_trained = self.weights_synced
        sent = self.actor.call("broadcast_weights", WEIGHTS_COLLECTIVE, only_trained)
        received = self.rollout.call("receive_weights", WEIGHTS_COLLECTIVE, only_trained)
        versions = ray.get(sent + received)
        if len(set(versions)) != 1:
            raise RuntimeError(f"weight broadcast left mixed policy versions {versions}")
        self.weights_synced = True
        return versions[0]

    def publish_weights(self):
        """The actor's ``(weights, version)`` copied to the object store (host memory); returns its reference.
        After the first publication only trained weights travel (see ``broadcast_weights``)."""
        return self.actor.call("get_weights", self.weights_synced)[0]

    def install_weights(self, weights_ref) -> int:
        """Load published weights into every rollout worker; returns their policy version."""
        version = ray.get(self.rollout.call("load_weights", weights_ref))[0]
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

    ``env_seed_offset`` moves the envs to fresh initial states (a resumed run must not replay the first episodes).
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
                      action_chunk=action_chunk(config),
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
    return EmbodiedWorkers(channel, env, rollout, actor, policy_spec, placement)
