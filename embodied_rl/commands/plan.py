"""``embodied-rl plan``: the memory each component of a run needs and whether each placement fits, before anything
starts (no Ray, no GPU; one CPU env is made to read the task's observation and action shapes).

    embodied-rl plan --task maniskill_pickcube policy.name=openvla_oft policy.size=full \
        policy.options.dtype=bfloat16 policy.options.lora_rank=32 --gpus 8 --gpu-memory 80GB

Per component: weights (exact, from the policy built on the meta device), gradients and Adam moments of the trained
weights (float32 master weights), activations of one update pass (``models/memory.py``: a minibatch, or a
micro-batch with ``actor.micro_batch_size``; ``actor.activation_checkpointing``), and the rollout worker's inference
working set. A sharded actor (``actor.backend=fsdp``) is planned per rank: its shard of the weights, gradients and
Adam state, what FSDP gathers whole while it runs, and the activations of its slice of each minibatch. Placements: collocated (every component on every GPU, taking turns, the actor offloaded while the
rollout samples: the larger of the two phases) and disaggregated (the actor on a GPU of its own, rollout workers on
the others). GPU simulator memory is not modelled (not measured yet): a verdict is for the models alone.
"""

from __future__ import annotations

import json
import math
import re

from embodied_rl.config.errors import ConfigError
from embodied_rl.models.memory import (GIB, Parameters, compute_bytes, inference_bytes, meta_policy,
                                       policy_stacks)

HEADROOM_GIB = 2.0
"""Per GPU for the CUDA context, the allocator's fragmentation and kernels' workspaces."""


def parse_memory(text: str) -> float:
    """``80GB`` / ``80GiB`` / ``80`` -> GiB (GB taken as GiB, as GPU vendors label them)."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*(gib|gb|g)?\s*", str(text).lower())
    if not match or not float(match.group(1)) > 0:
        raise ConfigError(f"--gpu-memory={text!r} is not allowed; allowed values: a size such as 80GB or 141GiB")
    return float(match.group(1))


_SHAPES: dict[str, tuple[dict, int]] = {}
"""Shapes already read, by task and the env options that can change them: a recipe's stages read them once (a camera
env renders on CPU, seconds a build)."""
SHAPE_FREE_OPTIONS = ("max_episode_steps", "ignore_terminations", "reward_mode", "reconfiguration_freq")
"""Env options that set how episodes run and score, never what an observation or action looks like (stages differ in
them: RL stages ignore terminations)."""


def _shapes(config) -> tuple[dict, int]:
    """The policy's observation arguments and action size, read from one CPU env of the task."""
    import sim_envs
    from embodied_rl.runners.setup import env_options, observation_spec

    options = dict(env_options(config), backend="cpu")
    key = json.dumps([config.task, {k: v for k, v in options.items() if k not in SHAPE_FREE_OPTIONS}],
                     sort_keys=True, default=repr)
    if key not in _SHAPES:
        env = sim_envs.make(config.task, 1, processes=False, seed=0, **options)
        try:
            obs = env.reset()
            shape = {k: v.shape[1:] for k, v in obs.items()} if isinstance(obs, dict) else obs.shape[1:]
            _SHAPES[key] = observation_spec(shape), int(env.single_action_shape[0])
        finally:
            env.close()
    return _SHAPES[key]


def embodied_plan(config) -> dict:
    """Memory per component (bytes) of one training iteration of ``config`` (a ``TrainConfig``)."""
    from embodied_rl.runners.setup import policy_size

    observation, action_dim = _shapes(config)
    spec = dict(name=config.policy.name, action_dim=action_dim, hidden_sizes=list(config.policy.hidden_sizes),
                init_log_std=config.policy.init_log_std, **observation, **policy_size(config),
                **dict(config.policy.options))
    policy = meta_policy(spec)
    params = Parameters.of(policy)
    buffers = sum(b.numel() * b.element_size() for b in policy.buffers())
    e = compute_bytes(policy)
    stacks = policy_stacks(policy)
    chunk = int(getattr(policy, "action_chunk", 1) or 1)
    a, env = config.algorithm, config.env
    decisions = env.num_workers * env.envs_per_worker * config.rollout.steps_per_iteration // chunk
    if getattr(a, "groups_per_update", None):  # an update holds the rounds that kept that many groups
        length = env.max_episode_steps or config.rollout.steps_per_iteration
        groups = env.num_workers * env.envs_per_worker // a.group_size * (config.rollout.steps_per_iteration // length)
        decisions *= math.ceil(a.groups_per_update / max(groups, 1))  # every group of each round kept: the most
    minibatches = getattr(a, "num_minibatches", None)  # RL; SFT trains on batch_size demonstrations at a time
    rows = max(1, decisions // minibatches) if minibatches else int(getattr(a, "batch_size", decisions))
    ranks = config.actor.world_size
    rows = min(math.ceil(rows / ranks), config.actor.micro_batch_size or rows)  # a rank's slice, or micro-batch
    activations = sum(s.activation_bytes(rows, e, config.actor.activation_checkpointing) for s in stacks)
    per_row = sum(s.activation_bytes(1, e, config.actor.activation_checkpointing) for s in stacks)
    if not stacks:  # MLP / CNN: small; each layer's input and output per row, float32
        activations = 3 * 4 * rows * sum(p.shape[0] for p in policy.parameters() if p.dim() == 2)
    inference_batch = math.ceil(env.num_workers * env.envs_per_worker / config.rollout.num_workers)
    weights = params.weight_bytes + buffers
    actor = {"weights": sharded_weight_bytes(policy, ranks) + buffers if ranks > 1 else weights,
             "gradients": params.trained_bytes / ranks, "optimizer": params.adam_bytes() / ranks,
             "activations": activations}
    rollout = {"weights": weights, "activations": inference_bytes(stacks, inference_batch, e)}
    return {"policy": config.policy.name, "size": config.policy.size, "dtype": str(getattr(
        policy, "compute_dtype", "float32")).removeprefix("torch."), "parameters": params.count,
            "trained_parameters": params.trained_count, "update_rows": rows, "inference_batch": inference_batch,
            "rollout_workers": config.rollout.num_workers, "activation_bytes_per_row": per_row,
            "actor_ranks": ranks,
            "components": {"actor": actor, "rollout": rollout}}


def sharded_weight_bytes(policy, ranks: int) -> float:
    """A sharded actor rank's weights at their peak (``actor.backend=fsdp``): its shard of every weight, plus what
    FSDP gathers whole while the policy runs: the root group (weights outside every shard group: embeddings,
    heads, Pi0's VLM) and two shard groups (the one running and the next, prefetched)."""
    from embodied_rl.engines.training.data_parallel import transformer_blocks

    units = policy.fsdp_units() if hasattr(policy, "fsdp_units") else transformer_blocks(policy)
    size = lambda module: sum(p.numel() * p.element_size() for p in module.parameters())  # noqa: E731
    total = size(policy)
    unit_bytes = [size(unit) for unit in units]
    gathered = total - sum(unit_bytes) + 2 * max(unit_bytes, default=0)
    return total / ranks + gathered * (ranks - 1) / ranks


def placements(trainer_gib: float, sampler_gib: float, collocated_gpus: int, disaggregated_gpus: int, gpus: int,
               gpu_gib: float, offloaded: bool = True) -> dict:
    """Peak per GPU (GiB), GPUs needed and the verdict of each placement on ``gpus`` GPUs of ``gpu_gib``: a GPU holds
    a trainer's or a sampler's peak (collocated, they take turns and the other is offloaded; ``offloaded=False``:
    nothing is offloaded, as for a sharded actor, and a collocated GPU holds both)."""
    peak = max(trainer_gib, sampler_gib)
    together = peak if offloaded else trainer_gib + sampler_gib
    result = {"collocated": {"peak_gib": together, "gpus": collocated_gpus},
              "disaggregated": {"peak_gib": peak, "gpus": disaggregated_gpus}}
    for entry in result.values():
        entry["fits"] = entry["peak_gib"] <= gpu_gib - HEADROOM_GIB and entry["gpus"] <= gpus
    return result


def print_placements(result: dict, gpu_gib: float, indent: str = "") -> None:
    for mode, entry in result.items():
        verdict = "fits" if entry["fits"] else "does not fit"
        print(f"{indent}{mode}: {entry['gpus']} GPU(s), peak {entry['peak_gib']:.1f} GiB per GPU of {gpu_gib:g} GiB "
              f"({HEADROOM_GIB:g} GiB kept free): {verdict}")


def _row(name: str, parts: dict) -> str:
    cells = [f"{parts.get(k, 0) / GIB:11.2f}" for k in ("weights", "gradients", "optimizer", "activations")]
    return f"{name:10s}{''.join(cells)}{sum(parts.values()) / GIB:11.2f}"


def run_plan(task: str | None, config_file: str | None, overrides: list[str], gpus: int, gpu_memory: str,
             as_json: bool, prompt_tokens: int = 256, profile: bool = False) -> int:
    """Plan each stage of the run ``train`` would make (a staged recipe's SFT and RL stages each); ``profile``: also
    what ``placement.auto`` measures and chooses for each RL stage on this machine."""
    from embodied_rl.commands.train_reasoning import is_text_task
    from embodied_rl.config.stages import load_stages

    gpu_gib = parse_memory(gpu_memory)
    if gpus < 1:
        raise ConfigError(f"--gpus={gpus} is not allowed; allowed values: an integer >= 1")
    if task is not None and is_text_task(task):
        from embodied_rl.commands.plan_text import run_text_plan

        if prompt_tokens < 1:
            raise ConfigError(f"--prompt-tokens={prompt_tokens} is not allowed; allowed values: an integer >= 1")
        if profile:
            raise ConfigError("--profile: placement.auto chooses placements of embodied tasks; text tasks plan "
                              "memory only")
        return run_text_plan(task, config_file, overrides, gpus, gpu_gib, as_json, prompt_tokens)
    _, stages = load_stages(task, config_file, overrides)
    plans = []
    for stage in stages:
        plan = embodied_plan(stage.config)
        actor, rollout = (sum(plan["components"][k].values()) / GIB for k in ("actor", "rollout"))
        # the embodied actor's peak is on each of its ranks' GPUs (one rank: one GPU whatever the count)
        ranks = plan["actor_ranks"]
        plan.update(stage=stage.name, algorithm=stage.config.algorithm.name, gpus=gpus, gpu_memory_gib=gpu_gib,
                    placements=placements(actor, rollout, ranks, ranks + plan["rollout_workers"], gpus, gpu_gib,
                                          offloaded=stage.config.actor.backend == "single"))
        plans.append(plan)
    if profile:
        _profile_stages(stages, plans)
    if as_json:
        print(json.dumps(plans))
        return 0
    for plan in plans:
        _print(stages[0].config.task, plan, gpu_gib)
        if plan.get("auto_placement"):
            print(plan["auto_placement"]["report"])
    print("simulator memory (env.backend=gpu) is not included")
    return 0


def _profile_stages(stages, plans: list[dict]) -> None:
    """``placement.auto``'s profile and choice for each RL stage (``plan["auto_placement"]``), on a local cluster."""
    from embodied_rl.algorithms.embodied import algorithm_needs
    from embodied_rl.config.schema import validate_auto_placement
    from embodied_rl.runners.auto_placement import choose
    from embodied_rl.runtime import Cluster

    rl = [(stage, plan) for stage, plan in zip(stages, plans)
          if algorithm_needs(stage.config.algorithm).demonstrations != "only"]
    for stage, _ in rl:
        validate_auto_placement(stage.config)
    if not rl:
        return
    with Cluster(num_cpus=rl[0][0].config.cluster.num_cpus) as cluster:
        for stage, plan in rl:
            choice = choose(stage.config, cluster)
            c = choice.candidate
            plan["auto_placement"] = {
                "chosen": {"name": c.name, "components": dict(c.components), "pipeline_stages": c.pipeline_stages,
                           "inline": c.inline},
                "predicted_iteration_s": {name: round(f["iteration_s"], 4) for name, f in choice.predictions.items()},
                "report": choice.report()}


def _print(task: str, plan: dict, gpu_gib: float) -> None:
    print(f"plan of stage {plan['stage']} ({plan['algorithm']}): {task}, policy {plan['policy']} ({plan['size']}, "
          f"{plan['dtype']}): {plan['parameters'] / 1e9:.3f}B parameters ({plan['trained_parameters'] / 1e6:.2f}M "
          f"trained, float32)")
    sharded = f" per actor rank ({plan['actor_ranks']} ranks, FSDP)" if plan["actor_ranks"] > 1 else ""
    print(f"  update pass: {plan['update_rows']} rows{sharded}; rollout inference batch: {plan['inference_batch']}")
    print(f"  {'GiB':10s}{'weights':>11s}{'gradients':>11s}{'optimizer':>11s}{'activations':>12s}{'total':>10s}")
    for name, parts in plan["components"].items():
        print("  " + _row(name, parts))
    print_placements(plan["placements"], gpu_gib, "  ")
    rows = largest_micro_batch(plan, gpu_gib)
    if rows is not None and rows < plan["update_rows"]:
        print(f"  the actor fits with actor.micro_batch_size={rows} (the same gradient, in "
              f"{math.ceil(plan['update_rows'] / rows)} passes)" if rows else
              "  the actor does not fit even one row per pass: try actor.activation_checkpointing=true (OpenVLA)")


def largest_micro_batch(plan: dict, gpu_gib: float) -> int | None:
    """The most rows per pass with which the actor fits a GPU (0: none; None: nothing to micro-batch)."""
    actor = plan["components"]["actor"]
    fixed = (sum(actor.values()) - actor["activations"]) / GIB
    per_row = plan["activation_bytes_per_row"] / GIB
    if not per_row:
        return None
    return max(0, int((gpu_gib - HEADROOM_GIB - fixed) / per_row))
