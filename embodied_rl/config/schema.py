"""Every hyperparameter of a training run, declared once with a one-line docstring.

Defaults follow ManiSkill's published PPO baseline where it applies; per-task recipes in ``configs/`` override them.
``validate`` checks ranges after YAML and command-line overrides are merged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from embodied_rl.config.errors import ConfigError
from embodied_rl.config.logging_section import LoggingConfig, validate_logging


def _default_algorithm():
    """PPO's config, the default algorithm section (imported when a config is built: importing the schema, as the
    command line does to parse, does not import torch)."""
    from embodied_rl.algorithms.embodied.ppo import PPOConfig

    return PPOConfig()


SCORE_LABELS = {"success_once": "success", "success_at_end": "success at end", "episode_return": "return"}
"""``eval.score`` values and how the progress line names them."""


@dataclass
class EnvConfig:
    num_workers: int = 4
    """Env worker processes (Ray actors)."""
    envs_per_worker: int = 4
    """Envs each env worker steps (on CPU one after another; on GPU one batched sim)."""
    obs_mode: str = "state"
    """'state' or 'rgb'."""
    image_size: int = 64
    """Camera width = height in pixels for obs_mode='rgb' (and for the camera demonstrations an SFT stage makes)."""
    control_mode: str = "pd_joint_delta_pos"
    """Robot controller."""
    reward_mode: str = "normalized_dense"
    """ManiSkill reward: normalized_dense, dense, sparse, or rlinf (RLinf's per-step differences of 0.1 grasped +
    0.1 held + 1.0 success: sim_envs/maniskill/rewards.py)."""
    max_episode_steps: Optional[int] = None
    """Time limit; None keeps the task's own."""
    ignore_terminations: bool = False
    """Run every training episode to the time limit, also past success (as evaluations do; GRPO's lock-step groups
    always do): with dense rewards, an episode that ends at success then cannot earn less than one that lingers."""
    reconfiguration_freq: int = 0
    """Rebuild the scene every this many resets (0 never; ManiSkill's CPU default 1 is much slower)."""
    backend: str = "auto"
    """'auto', 'cpu' or 'gpu'."""
    pipeline_stages: int = 1
    """Split each env worker's envs into this many groups so simulation overlaps policy inference."""
    kwargs: Dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the task's own env constructor: ``gym:<id>`` tasks pass them to
    ``gymnasium.make(id, **kwargs)`` (e.g. ``env.kwargs.g=9.81`` for Pendulum); other families take none."""


@dataclass
class RolloutConfig:
    num_workers: int = 1
    """Rollout (inference) worker processes."""
    steps_per_iteration: int = 50
    """Env steps per env per iteration (the PPO horizon T)."""
    weight_sync: str = "auto"
    """How new weights reach the rollout workers: 'broadcast' (a collective group of the actor and the rollout
    workers: NCCL between GPUs, gloo on CPU), 'object_store' (through Ray's object store in host memory, between
    turns), or 'auto' (broadcast unless sampling and training share slots and take turns)."""
    max_staleness: int = 0
    """0: synchronous (sample, then update, then sync weights). 1: the next round is sampled while the actor
    updates on the last one, with the weights from before that update, so each update trains on data one policy
    version old (PPO's ratio against the stored behaviour log-probs corrects for it). Needs sampling and training
    on their own slots (``placement.components``)."""
    inline: bool = False
    """Each env worker computes its own actions with an inference copy of the policy in its own process, on its own
    slots (RLinf's collocated env + rollout): no rollout worker processes (``num_workers`` is not used), no channel
    round trip per step. Fastest where a rollout worker would share the env workers' cores or GPU anyway; requests
    are no longer batched across env workers. Weight syncs then reach the env workers."""


@dataclass
class ActorConfig:
    """How the actor computes its updates (memory, not the algorithm: the gradients are the same)."""

    micro_batch_size: Optional[int] = None
    """Rows per forward/backward pass: each minibatch is computed in micro-batches of this many rows with its
    gradient accumulated (the same gradient as one pass; peak activations of one micro-batch). None: one pass."""
    activation_checkpointing: bool = False
    """Recompute the policy's transformer layers in the backward pass instead of keeping their activations
    (a VLA's language model and vision tower; about a third more compute)."""
    backend: str = "single"
    """single (one process) or fsdp (FSDP2: ``world_size`` processes, the policy's weights, gradients and Adam state
    sharded over them, one shard group per transformer block of a VLA; on GPUs one per actor slot)."""
    world_size: int = 1
    """Actor processes: 1 for backend single; >= 1 for fsdp."""


@dataclass
class PolicyConfig:
    name: str = "mlp"
    """A registered policy."""
    size: str = "tiny"
    """For policies with published sizes (openvla, openvla_oft, pi0; their class attribute ``sizes``): ``tiny`` runs
    on a laptop CPU, ``full`` is the published architecture (a GPU's worth of memory). Other policies: tiny."""
    hidden_sizes: List[int] = field(default_factory=lambda: [256, 256, 256])
    """Widths of the actor and critic hidden layers."""
    init_log_std: float = -0.5
    """Initial log standard deviation of the Gaussian actions."""
    options: Dict[str, Any] = field(default_factory=dict)
    """Further keyword arguments of the registered policy, e.g. {token_size: 2, num_layers: 2} for 'transformer'."""


@dataclass
class EvalConfig:
    every_iterations: int = 20
    """Evaluate every this many iterations (0: only at the end)."""
    num_episodes: int = 64
    """Episodes per evaluation (full length), one from each initial state ``seed, seed + 1, ...``."""
    seed: int = 10_000_000
    """First initial state (ManiSkill reset seed) of the evaluation set: every evaluation of a run (and of any run
    or checkpoint with the same ``seed`` and ``num_episodes``) starts from the same states, however many env
    workers share them. Far from the training envs' seeds (``seed + env index + k * total envs``)."""
    max_episode_steps: Optional[int] = None
    """Time limit of evaluation episodes; None: the training envs' (``env.max_episode_steps``, else the task's own).
    A run that trains at a longer limit can so report success at the task's standard one."""
    greedy: bool = True
    """Evaluate the policy's most likely actions (argmax tokens, the mean Gaussian, Pi0's ODE from zero noise);
    False: actions sampled as in training (at the policy's own temperature or noise level)."""
    sampled: bool = False
    """With ``greedy``: also run the same states with sampled actions (metrics ``eval_sampled/...``), the
    policy RL actually trains."""
    video_episodes: int = 0
    """Episodes filmed into videos/eval_iter_N.mp4 (a grid of 128 px tiles) at the final evaluation; 0: none.
    Slow on CPU (lavapipe): the first frame of a process compiles the render pipelines (~25 s), then ~0.04 s a frame
    on a quiet 2-core machine, 0.1-0.3 s on a busy one: 4 PickCube episodes (50 steps) took 45-90 s here."""
    video_every_evaluations: int = 0
    """With video_episodes: also film every this many evaluations (0: only the final one)."""
    stop_at_success: Optional[float] = None
    """End the run (with a checkpoint) at the first evaluation whose success_once reaches this; None: never."""
    score: str = "success_once"
    """What ranks evaluations (the best checkpoint) and the progress line shows: ``success_once``,
    ``success_at_end`` or ``episode_return`` (tasks scored by their return, e.g. ``gym:Pendulum-v1``)."""
    split: Optional[str] = None
    """Evaluate out of distribution (ManiSkill tasks): 'vision' (lighting, object colours, camera pose), 'semantic'
    (object size, a held-out instruction) or 'execution' (perturbed initial object and arm, a push mid-episode),
    each drawn from the state's seed on the same fixed states (sim_envs/maniskill/ood_splits.py); None: in
    distribution. Metrics stay ``eval/...``, with ``eval/split`` naming it."""
    ood_splits: list = field(default_factory=list)
    """Splits also evaluated at every evaluation, beside ``split``, on the same states: metrics
    ``eval_<split>/...`` (e.g. ``eval_execution/success_once``); costs one more evaluation each."""


@dataclass
class CheckpointConfig:
    every_iterations: int = 20
    """Save every this many iterations (and always at the end)."""
    keep_last: int = 3
    """Checkpoints kept on disk."""


@dataclass
class AutoscaleConfig:
    enabled: bool = False
    """Resize env and rollout workers between iterations from measured waits (``runners/autoscale.py``): env workers
    waiting for actions -> one more rollout worker; rollout workers idle -> one more env worker."""
    every_iterations: int = 5
    """Iterations of measurements behind each decision (counted again after every change)."""
    threshold: float = 0.4
    """A side is waiting when it spends more than this share of its sampling time waiting for the other."""
    min_env_workers: int = 1
    max_env_workers: Optional[int] = None
    """None: the env slots of the placement (or env.num_workers, if more)."""
    min_rollout_workers: int = 1
    max_rollout_workers: Optional[int] = None
    """None: the rollout slots of the placement (or rollout.num_workers, if more)."""


@dataclass
class FaultConfig:
    hang_timeout_s: float = 300.0
    """An env or rollout worker in a sampling round or evaluation that neither answers its heartbeat nor makes
    progress (requests, simulator steps, answers) for this long is hung: it is killed and replaced like a dead one
    (``fault/hung_workers_killed``). Keep it above the slowest single step (and an evaluation env's construction).
    Also the deadline of short calls on workers (weights, counters), of an env worker's trajectory put and (twice
    it) of its wait for an answer, and of the actor's wait for a round's trajectories."""
    start_timeout_s: float = 600.0
    """A worker (at start, as a replacement, or added by a resize) must finish constructing within this; else the
    start fails naming the group and the resources Ray had (a failed resize rolls back to the old sizes)."""
    update_timeout_s: float = 3600.0
    """One actor update (its trajectories taken from the channel and trained on) must finish within this."""


@dataclass
class ClusterConfig:
    address: Optional[str] = None
    """Ray cluster to join (None: start an embedded local Ray)."""
    num_cpus: Optional[float] = None
    """CPU slots of the embedded Ray (None: all cores)."""


@dataclass
class PlacementConfig:
    slots: Optional[int] = None
    """Device slots: CPU cores on a CPU-only machine, GPUs where they exist (None: all of this machine's)."""
    components: Dict[str, str] = field(default_factory=dict)
    """Component(s) -> slots, e.g. {"env,rollout": "0-1", "actor": "0-1"}; empty: everything on every slot."""
    nodes: Dict[str, str] = field(default_factory=dict)
    """Component -> Ray node indices (alive nodes, the head first), e.g. {"env": "1", "actor": "0"}; empty: any."""
    offload: str = "auto"
    """When sampling and training share slots, move the idle side's weights and optimizer state off the device
    between turns: 'auto' (do) or 'never' (keep them resident; the turns are still taken)."""
    auto: bool = False
    """Choose ``components``, ``env.pipeline_stages`` and ``rollout.inline`` by measuring: a short profile of the
    simulator, inference, messages and the update on this machine, then the placement with the shortest predicted
    iteration (``runners/auto_placement.py``; printed with its reasons). CPU slots and on-policy learners; a
    ``components`` map given with it wins. ``placement=auto`` on the command line is short for it."""
    auto_report: Optional[str] = None
    """Written by ``auto``: what it measured and chose, kept in the run's config."""
    actor_threads: Optional[int] = None
    """The actor's torch intra-op threads on CPU; None: 2 for the on-policy learners (few large minibatches), 1 for
    the off-policy ones (many small steps). Small models' many small ops are best at 1 whenever the cores are shared:
    threads of one op wait for each other at every op (the tiny VLA recipes' SFT ran > 1 s per step with 2 beside
    another run on 2 cores, 0.15 s with 1)."""


@dataclass
class TrainConfig:
    task: Optional[str] = None
    """A registered task (``embodied-rl tasks``); required."""
    seed: int = 0
    """Seed of envs, policy initialization and minibatch order."""
    deterministic: bool = False
    """Reproducible sampling: each env worker's request carries a seed of its own (from the run's seed, the worker,
    the stage and the request's number) and is answered in a forward pass of its own, so the actions, and with them
    the whole run on CPU, depend on the seed and the placement only, not on timing; a run resumed from a checkpoint
    of the synchronous loop then continues bit for bit. Costs the batching of requests across env workers."""
    total_env_steps: int = 2_000_000
    """Stop after this many env steps."""
    runs_root: str = "runs"
    """Where run directories are created."""
    run_dir: Optional[str] = None
    """This run's directory (None: ``runs_root/<task>-<time>``)."""
    init_from: Optional[str] = None
    """Start from this checkpoint's weights (a checkpoint or run directory), e.g. an SFT result; None: random."""
    log_every_iterations: int = 1
    """Write scalars every this many iterations."""
    channel_transport: str = "auto"
    """How workers exchange data: auto (large arrays through shared memory within a node, on a gloo pair across
    nodes), socket, shared_memory, collective (large arrays on a gloo pair everywhere)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    algorithm: Any = field(default_factory=lambda: _default_algorithm())
    """The algorithm section: ``algorithm.name`` picks one from the registry, its other keys are that algorithm's
    own config (``embodied_rl/algorithms/embodied/<name>.py``)."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    autoscale: AutoscaleConfig = field(default_factory=AutoscaleConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    fault: FaultConfig = field(default_factory=FaultConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Trackers beside metrics.jsonl: ``logging.backends`` (tensorboard, wandb, swanlab, mlflow), offline by default
    (``embodied_rl/config/logging_section.py``)."""
    stages: List[Any] = field(default_factory=list)
    """A staged recipe: runs one after another, each a mapping of config keys over this config (e.g.
    ``{name: sft, algorithm: {name: sft}}`` then ``{name: rl, algorithm: {name: grpo}, total_env_steps: 200000}``),
    each starting from the previous stage's best checkpoint; empty: one run of this config."""


def _require(condition: bool, key: str, value, allowed: str) -> None:
    if not condition:
        raise ConfigError(f"{key}={value!r} is out of range; allowed: {allowed}")


def validate(config: TrainConfig, purpose: str = "train") -> None:
    """Range checks that types alone cannot express. Raises ConfigError naming the key.

    ``purpose="eval"``: the config only runs a policy (``embodied-rl eval``), so the training algorithm's rules
    (batch sizes, chunks that divide the rollout, lock-step groups) are not applied."""
    c = config
    _require(c.total_env_steps >= 1, "total_env_steps", c.total_env_steps, "an integer >= 1")
    _require(c.channel_transport in ("auto", "socket", "shared_memory", "collective"), "channel_transport",
             c.channel_transport, "auto, socket, shared_memory, collective")
    _require(c.log_every_iterations >= 1, "log_every_iterations", c.log_every_iterations, "an integer >= 1")
    _require(c.env.num_workers >= 1, "env.num_workers", c.env.num_workers, "an integer >= 1")
    _require(c.env.envs_per_worker >= 1, "env.envs_per_worker", c.env.envs_per_worker, "an integer >= 1")
    _require(1 <= c.env.pipeline_stages <= c.env.envs_per_worker, "env.pipeline_stages", c.env.pipeline_stages,
             f"1 to env.envs_per_worker ({c.env.envs_per_worker})")
    _require(c.env.obs_mode in ("state", "rgb"), "env.obs_mode", c.env.obs_mode, "state, rgb")
    _require(c.env.image_size >= 16, "env.image_size", c.env.image_size, "an integer >= 16 (pixels)")
    _require(c.env.backend in ("auto", "cpu", "gpu"), "env.backend", c.env.backend, "auto, cpu, gpu")
    _require(c.env.reward_mode in ("normalized_dense", "dense", "sparse", "rlinf"), "env.reward_mode",
             c.env.reward_mode, "normalized_dense, dense, sparse, rlinf")
    _require(c.env.reconfiguration_freq >= 0, "env.reconfiguration_freq", c.env.reconfiguration_freq, ">= 0")
    _require(c.env.max_episode_steps is None or c.env.max_episode_steps >= 1, "env.max_episode_steps",
             c.env.max_episode_steps, "null or an integer >= 1")
    _require(c.rollout.num_workers >= 1, "rollout.num_workers", c.rollout.num_workers, "an integer >= 1")
    _require(c.rollout.steps_per_iteration >= 1, "rollout.steps_per_iteration", c.rollout.steps_per_iteration,
             "an integer >= 1")
    _require(c.actor.micro_batch_size is None or c.actor.micro_batch_size >= 1, "actor.micro_batch_size",
             c.actor.micro_batch_size, "null (one pass per minibatch) or an integer >= 1")
    _require(c.actor.backend in ACTOR_BACKENDS, "actor.backend", c.actor.backend, ", ".join(ACTOR_BACKENDS))
    _require(c.actor.world_size == 1 if c.actor.backend == "single" else c.actor.world_size >= 1, "actor.world_size",
             c.actor.world_size, "1 for actor.backend=single; an integer >= 1 for fsdp")
    _require(len(c.policy.hidden_sizes) >= 1 and all(h >= 1 for h in c.policy.hidden_sizes),
             "policy.hidden_sizes", list(c.policy.hidden_sizes), "a non-empty list of positive integers")
    if purpose == "train":
        _validate_algorithm(c)
    _validate_ood_splits(c)
    _require(c.eval.max_episode_steps is None or c.eval.max_episode_steps >= 1, "eval.max_episode_steps",
             c.eval.max_episode_steps, "null or an integer >= 1")
    _require(c.eval.seed >= 0, "eval.seed", c.eval.seed, "an integer >= 0")
    _require(c.eval.every_iterations >= 0, "eval.every_iterations", c.eval.every_iterations, "an integer >= 0")
    _require(c.eval.num_episodes >= 1, "eval.num_episodes", c.eval.num_episodes, "an integer >= 1")
    _require(c.eval.video_episodes >= 0, "eval.video_episodes", c.eval.video_episodes, "an integer >= 0")
    _require(c.eval.video_every_evaluations >= 0, "eval.video_every_evaluations", c.eval.video_every_evaluations,
             "an integer >= 0")
    _require(c.eval.score in SCORE_LABELS, "eval.score", c.eval.score, ", ".join(SCORE_LABELS))
    _require(c.eval.stop_at_success is None or 0 <= c.eval.stop_at_success <= 1, "eval.stop_at_success",
             c.eval.stop_at_success, "null or a success rate in [0, 1]")
    _require(c.checkpoint.every_iterations >= 0, "checkpoint.every_iterations", c.checkpoint.every_iterations,
             "an integer >= 0")
    _require(c.checkpoint.keep_last >= 1, "checkpoint.keep_last", c.checkpoint.keep_last, "an integer >= 1")
    _require(c.cluster.num_cpus is None or c.cluster.num_cpus > 0, "cluster.num_cpus", c.cluster.num_cpus,
             "null or > 0")
    for key in ("hang_timeout_s", "start_timeout_s", "update_timeout_s"):
        _require(getattr(c.fault, key) > 0, f"fault.{key}", getattr(c.fault, key), "seconds > 0")
    _require(c.placement.slots is None or c.placement.slots >= 1, "placement.slots", c.placement.slots,
             "null or an integer >= 1")
    _require(c.rollout.weight_sync in ("auto", "broadcast", "object_store"), "rollout.weight_sync",
             c.rollout.weight_sync, "auto, broadcast, object_store")
    _require(c.placement.offload in ("auto", "never"), "placement.offload", c.placement.offload, "auto, never")
    _require(c.placement.actor_threads is None or c.placement.actor_threads >= 1, "placement.actor_threads",
             c.placement.actor_threads, "null or an integer >= 1")
    validate_logging(c.logging)
    placement = resolve_placement(c)
    _validate_sharded_actor(c, placement)
    _validate_autoscale(c)
    if c.placement.auto:
        validate_auto_placement(c)
    if c.rollout.inline and c.autoscale.enabled:
        raise ConfigError("rollout.inline=true with autoscale.enabled=true: the autoscaler balances env workers "
                          "against rollout workers, and inline runs have none; allowed: one of them")
    _require(c.rollout.max_staleness in (0, 1), "rollout.max_staleness", c.rollout.max_staleness,
             "0 (synchronous) or 1 (sampling overlaps the update)")
    if c.rollout.max_staleness and not (c.placement.auto and not dict(c.placement.components)):  # auto: disjoint
        sampling = set(placement.slots["env"]) | set(placement.slots["rollout"])
        if sampling & set(placement.slots["actor"]):
            raise ConfigError(f"rollout.max_staleness={c.rollout.max_staleness} needs sampling and training on "
                              f"their own slots, but the placement gives env/rollout slots {sorted(sampling)} and "
                              f"the actor {sorted(placement.slots['actor'])}; allowed: placement.components with "
                              f"disjoint slots, e.g. {{'env,rollout': '0', 'actor': '1'}}")
    _validate_policy(c)
    if purpose == "train":
        _validate_policy_for_algorithm(c)


def _validate_ood_splits(c: TrainConfig) -> None:
    """``eval.split`` and ``eval.ood_splits``: splits the task's simulator has (ManiSkill's: ood_splits.py)."""
    import sim_envs
    from sim_envs.maniskill.ood_splits import SPLITS, TASK_OBJECTS

    _require(isinstance(c.eval.ood_splits, (list, tuple)), "eval.ood_splits", c.eval.ood_splits,
             f"a list of splits ({', '.join(SPLITS)})")
    for key, split in [("eval.split", c.eval.split), *(("eval.ood_splits", s) for s in c.eval.ood_splits)]:
        if split is None:
            continue
        _require(split in SPLITS, key, split, f"null or one of {', '.join(SPLITS)}" if key == "eval.split"
                 else f"a list of {', '.join(SPLITS)}")
        entry = sim_envs.get_task(c.task) if c.task in sim_envs.list_tasks() else None
        _require(entry is not None and entry.simulator == "maniskill" and entry.env_id in TASK_OBJECTS, key, split,
                 f"only for the ManiSkill tasks with OOD splits ({', '.join(TASK_OBJECTS)}); task {c.task!r} has "
                 "none")


def validate_auto_placement(c: TrainConfig) -> None:
    """Where ``placement.auto`` cannot choose (its profile and model cover one node's CPU cores and on-policy
    updates)."""
    from embodied_rl.algorithms.embodied import algorithm_needs

    preset = "set placement.components (a preset) instead"
    if slots_are_gpus(c):
        raise ConfigError(f"placement.auto=true profiles CPU cores, and this run's slots are GPUs; {preset}")
    if algorithm_needs(c.algorithm).replay:
        raise ConfigError(f"placement.auto=true models on-policy updates; algorithm.name={c.algorithm.name} is "
                          f"off-policy; {preset}")
    if dict(c.placement.nodes):
        raise ConfigError(f"placement.auto=true chooses cores on one node, and placement.nodes is set; {preset}")


def _validate_autoscale(c: TrainConfig) -> None:
    a = c.autoscale
    _require(a.every_iterations >= 1, "autoscale.every_iterations", a.every_iterations, "an integer >= 1")
    _require(0 < a.threshold < 1, "autoscale.threshold", a.threshold, "a share between 0 and 1 (exclusive)")
    for side in ("env", "rollout"):
        low, high = getattr(a, f"min_{side}_workers"), getattr(a, f"max_{side}_workers")
        _require(low >= 1, f"autoscale.min_{side}_workers", low, "an integer >= 1")
        _require(high is None or high >= low, f"autoscale.max_{side}_workers", high,
                 f"null or an integer >= autoscale.min_{side}_workers ({low})")


ACTOR_BACKENDS = ("single", "fsdp")


def _validate_sharded_actor(c: TrainConfig, placement) -> None:
    """A sharded actor (``actor.backend=fsdp``) trains on-policy algorithms in float32 or bf16, one rank per GPU."""
    if c.actor.backend == "single":
        return
    from embodied_rl.algorithms.embodied import algorithm_needs

    if algorithm_needs(c.algorithm).replay:
        raise ConfigError(f"actor.backend={c.actor.backend!r} does not train algorithm.name={c.algorithm.name!r} "
                          "(an off-policy learner keeps its own critics and optimizers); allowed: actor.backend=single")
    if str(c.policy.options.get("dtype", "float32")) == "float16":
        raise ConfigError(f"actor.backend={c.actor.backend!r} needs policy.options.dtype=bfloat16 or float32, not "
                          "float16 (its loss scaling is single-process); allowed: actor.backend=single for float16")
    import torch

    # (on a machine without GPUs, e.g. for ``embodied-rl plan`` of a GPU node, there is no GPU count to check)
    if slots_are_gpus(c) and torch.cuda.is_available() and len(placement.slots["actor"]) < c.actor.world_size:
        raise ConfigError(f"actor.world_size={c.actor.world_size} needs one GPU per rank, but the placement gives the "
                          f"actor {len(placement.slots['actor'])} ({sorted(placement.slots['actor'])}); allowed: at "
                          "most as many ranks as actor slots")
    sampling = set(placement.slots["env"]) | set(placement.slots["rollout"])
    if slots_are_gpus(c) and torch.cuda.is_available() and c.placement.offload == "auto" and \
            sampling & set(placement.slots["actor"]):
        raise ConfigError(f"actor.backend={c.actor.backend!r} on GPUs it shares with sampling would be offloaded "
                          "between turns, which FSDP's sharded weights do not survive; allowed: "
                          "placement.offload=never, or placement.components giving the actor its own GPUs")


def _validate_algorithm(c: TrainConfig) -> None:
    from embodied_rl.algorithms.embodied import algorithm_needs

    a = c.algorithm
    grouped = algorithm_needs(a).groups
    chunk = c.policy.options.get("action_chunk", 1)
    _require(isinstance(chunk, int) and chunk >= 1 and c.rollout.steps_per_iteration % chunk == 0,
             "policy.options.action_chunk", chunk, f"a divisor of rollout.steps_per_iteration "
             f"({c.rollout.steps_per_iteration})")
    if grouped and c.env.max_episode_steps:
        _require(c.env.max_episode_steps % chunk == 0, "policy.options.action_chunk", chunk,
                 f"a divisor of env.max_episode_steps ({c.env.max_episode_steps}) for grouped episodes")
    for key, value, allowed in a.problems():
        _require(False, f"algorithm.{key}", value, allowed)
    envs = c.env.num_workers * c.env.envs_per_worker
    if hasattr(a, "num_minibatches"):
        samples = envs * c.rollout.steps_per_iteration
        _require(a.num_minibatches <= samples, "algorithm.num_minibatches", a.num_minibatches,
                 f"at most the {samples} samples of one iteration")
    if grouped:
        _require(envs % a.group_size == 0, "algorithm.group_size", a.group_size,
                 f"a divisor of the {envs} envs (env.num_workers x env.envs_per_worker)")
        length = c.env.max_episode_steps
        if length is None or c.rollout.steps_per_iteration % length:
            raise ConfigError(f"rollout.steps_per_iteration={c.rollout.steps_per_iteration} must be a multiple of "
                              f"env.max_episode_steps={length} for algorithm.name={a.name!r} (its groups run "
                              "whole episodes in lock-step)")


def _validate_policy(c: TrainConfig) -> None:
    from embodied_rl.models import POLICIES
    from embodied_rl.models.registry import observation_modes, policy_options, policy_sizes, token_level

    _require(c.policy.name in POLICIES.names(), "policy.name", c.policy.name, ", ".join(POLICIES.names()))
    allowed = policy_options(c.policy.name)
    for option in c.policy.options:
        _require(option in allowed, f"policy.options.{option}", c.policy.options[option],
                 f"options of policy {c.policy.name!r}: {', '.join(allowed) or 'none'}")
    sizes = policy_sizes(c.policy.name)
    _require(c.policy.size in sizes, "policy.size", c.policy.size, f"sizes of policy {c.policy.name!r}: "
             f"{', '.join(sizes)}")
    if hasattr(c.algorithm, "ratio_level") and c.algorithm.setting("ratio_level") == "token" and not token_level(
            c.policy.name):
        takers = [name for name in POLICIES.names() if token_level(name)]
        raise ConfigError(f"algorithm.ratio_level='token' needs a policy with token log-probs ({', '.join(takers)}); "
                          f"policy.name={c.policy.name!r} has one log-prob per decision (ratio_level: decision)")
    if c.actor.activation_checkpointing and not POLICIES.get(c.policy.name).checkpointable_layers:
        takers = [name for name in POLICIES.names() if POLICIES.get(name).checkpointable_layers]
        raise ConfigError(f"actor.activation_checkpointing=true needs a policy with transformer layers "
                          f"({', '.join(takers)}); policy.name={c.policy.name!r} has none")
    modes = observation_modes(c.policy.name)
    if c.env.obs_mode not in modes:
        takers = [name for name in POLICIES.names() if c.env.obs_mode in observation_modes(name)]
        raise ConfigError(f"env.obs_mode={c.env.obs_mode!r} needs a policy that takes it ({', '.join(takers)}); "
                          f"policy.name={c.policy.name!r} takes obs_mode={', '.join(modes)}")


def _validate_policy_for_algorithm(c: TrainConfig) -> None:
    """Off-policy learners need a policy with Q critics and reparameterised draws; the others need ``evaluate``
    (and RL ones its values) or ``supervised_loss``."""
    from embodied_rl.algorithms.embodied import algorithm_needs
    from embodied_rl.models import POLICIES

    needs = algorithm_needs(c.algorithm)
    if needs.demonstrations == "only":
        methods, wanted = ("supervised_loss",), "supervised_loss"
    elif needs.replay:
        methods, wanted = ("q_values", "sample"), "Q critics (q_values, sample)"
    else:
        methods, wanted = ("evaluate",), "evaluate (log-probs of stored actions)"
    fits = lambda name: all(hasattr(POLICIES.get(name), m) for m in methods)  # noqa: E731
    if not fits(c.policy.name):
        takers = [name for name in POLICIES.names() if fits(name)]
        raise ConfigError(f"policy.name={c.policy.name!r} does not fit algorithm.name={c.algorithm.name!r}, which "
                          f"needs a policy with {wanted}; allowed: {', '.join(takers)}")
    q_subsample = getattr(c.algorithm, "q_subsample", None)
    num_q = int(c.policy.options.get("num_q", 2))
    if q_subsample is not None and q_subsample > num_q:
        raise ConfigError(f"algorithm.q_subsample={q_subsample} is out of range; allowed: at most the policy's "
                          f"critics (policy.options.num_q={num_q})")
    for key in ("clone_kl_weight", "clone_entropy_target"):
        if getattr(c.algorithm, key, 0) and not c.policy.options.get("residual", False):
            raise ConfigError(f"algorithm.{key}={getattr(c.algorithm, key)} needs the residual actor on a frozen "
                              "clone; allowed: policy.options.residual=true (with init_from an SFT checkpoint)")


def slots_are_gpus(config: TrainConfig) -> bool:
    """A placement slot is a GPU when envs may use one (backend gpu, or auto where CUDA exists), else a CPU core."""
    if config.env.backend == "cpu":
        return False
    import torch

    return config.env.backend == "gpu" or torch.cuda.is_available()


def resolve_placement(config: TrainConfig):
    """The run's ``Placement`` (mode derived from the map); bad maps raise ConfigError naming the component."""
    import os

    from embodied_rl.runtime.placement import PlacementError, build_placement

    if slots_are_gpus(config):
        import torch

        kind, available = "GPU", max(torch.cuda.device_count(), 1)
    else:
        kind, available = "core", os.cpu_count() or 1
    slots = config.placement.slots or available
    if slots > available:
        raise ConfigError(f"placement.slots={slots} is out of range; on this machine a slot is a {kind} and there "
                          f"are {available}")
    components = dict(config.placement.components) or {"env,rollout,actor": f"0-{slots - 1}"}
    try:
        return build_placement(components, slots, config.env.pipeline_stages)
    except PlacementError as error:
        raise ConfigError(str(error)) from None
