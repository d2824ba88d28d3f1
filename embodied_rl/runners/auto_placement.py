"""``placement.auto``: choose where the components run by measuring them on the machine at hand.

A short profile (``profile_components``, in the driver's process, one core at a time, no Ray):

* simulator: seconds per vector step of one env worker's envs (``K`` steps per decision with action chunks);
* inference: seconds per forward pass at the batches the candidates would use (one env worker's envs, one pipeline
  stage's, every env worker's at once);
* transfer: seconds of one request (the observation batch) and its answer through the run's channel between two
  processes on one core, as an env worker and a rollout worker exchange them;
* update: seconds of one round's update (forward, backward and Adam step over the round's samples, ``update_epochs``
  times) at 1 and 2 torch threads;
* memory: the policy's weights (bytes per weight sync).

``predict`` turns a profile into seconds per iteration for each candidate placement (collocated, collocated with
inline policies, collocated and pipelined, and on 2+ cores sampling apart from the actor, with or without inline
policies, and env apart from rollout + actor), ``choose`` takes the fastest and says why; the choice sets
``placement.components``, ``env.pipeline_stages`` and ``rollout.inline``. CPU slots and on-policy learners only.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from embodied_rl.config.errors import ConfigError
from embodied_rl.config.schema import validate_auto_placement

PROFILE_STEPS = 12
"""Timed vector steps (after 3 of warm-up) of the simulator profile."""


@dataclass
class ComponentProfile:
    """Measured on one core: ``sim_s`` per vector step of ``envs`` envs, ``inference_s`` per forward pass by batch
    size, ``message_s`` per request + answer round trip, ``update_s`` per round's update by torch threads,
    ``weight_bytes`` of the policy."""
    envs: int
    sim_s: float
    inference_s: dict[int, float]
    message_s: float
    update_s: dict[int, float]
    weight_bytes: int
    profile_s: float = 0.0

    def inference(self, batch: int) -> float:
        """Seconds of one pass at ``batch`` rows, interpolated linearly between the measured batches."""
        sizes = sorted(self.inference_s)
        return float(np.interp(batch, sizes, [self.inference_s[b] for b in sizes]))


@dataclass(frozen=True)
class Candidate:
    name: str
    components: dict = field(hash=False)
    pipeline_stages: int = 1
    inline: bool = False

    def describe(self) -> str:
        slots = ", ".join(f"{k}: {v}" for k, v in self.components.items())
        extra = (["inline policies"] if self.inline else []) + (
            [f"{self.pipeline_stages} pipeline stages"] if self.pipeline_stages > 1 else [])
        return f"{self.name} ({slots}{'; ' + ', '.join(extra) if extra else ''})"


def candidates(cores: int, envs_per_worker: int, disjoint_only: bool) -> list[Candidate]:
    """The placements ``choose`` weighs on ``cores`` CPU slots (``disjoint_only``: sampling and training on slots of
    their own, which ``rollout.max_staleness=1`` needs)."""
    every = f"0-{cores - 1}" if cores > 1 else "0"
    found = []
    if not disjoint_only:
        found += [Candidate("collocated", {"env,rollout,actor": every}),
                  Candidate("collocated_inline", {"env,rollout,actor": every}, inline=True)]
        if envs_per_worker >= 2:
            found.append(Candidate("collocated_pipelined", {"env,rollout,actor": every}, pipeline_stages=2))
    if cores >= 2:
        sampling = f"0-{cores - 2}" if cores > 2 else "0"
        last = str(cores - 1)
        found += [Candidate("split", {"env,rollout": sampling, "actor": last}),
                  Candidate("split_inline", {"env,rollout": sampling, "actor": last}, inline=True)]
        if not disjoint_only:
            found.append(Candidate("hybrid_split", {"env": sampling, "rollout,actor": last}))
    return found


def _slots(candidate: Candidate, component: str, cores: int) -> set[int]:
    from embodied_rl.runtime.placement import build_placement

    return set(build_placement(candidate.components, cores, candidate.pipeline_stages).slots[component])


def predict(profile: ComponentProfile, candidate: Candidate, config, cores: int) -> dict:
    """Predicted seconds of one iteration of ``config`` on ``candidate``: ``sampling_s``, ``update_s``, ``sync_s``
    and ``iteration_s`` (sampling then update; with ``rollout.max_staleness=1`` the larger of the two)."""
    from embodied_rl.runners.setup import action_chunk, actor_torch_threads

    W, E, S = config.env.num_workers, config.env.envs_per_worker, candidate.pipeline_stages
    R = 0 if candidate.inline else config.rollout.num_workers
    decisions = config.rollout.steps_per_iteration // action_chunk(config)
    sim = action_chunk(config) * profile.sim_s * E / profile.envs  # one worker's decision, all its envs
    env_slots, rollout_slots = _slots(candidate, "env", cores), _slots(candidate, "rollout", cores)
    actor_slots = _slots(candidate, "actor", cores)
    if candidate.inline:
        per_worker = sim + profile.inference(E)
        sampling = decisions * per_worker * max(1.0, W / len(env_slots))
    else:
        message = profile.message_s
        passes = S * profile.inference(W * E / S)  # a pass per stage, the env workers' requests batched
        cycle = (sim + message + profile.inference(W * E)) if S == 1 else max(
            sim, sim / S + message + profile.inference(W * E / S))  # one stage simulates while another infers
        env_work, rollout_work = W * (sim + message / 2), passes + W * message / 2
        if env_slots & rollout_slots:
            shared = env_slots | rollout_slots
            busy = (env_work + rollout_work) / min(len(shared), W + R)
        else:
            busy = max(env_work / min(len(env_slots), W), rollout_work / min(len(rollout_slots), R))
        sampling = decisions * max(cycle, busy)
    threads = max(1, min(actor_torch_threads(config), len(actor_slots)))
    update = profile.update_s[min(profile.update_s, key=lambda t: abs(t - threads))]
    sync = profile.weight_bytes / 1e9  # host copies at about 1 GB/s, as bench channel measured
    iteration = (max(sampling, update) if config.rollout.max_staleness else sampling + update) + sync
    return {"sampling_s": sampling, "update_s": update, "sync_s": sync, "iteration_s": iteration}


@dataclass
class Choice:
    candidate: Candidate
    predictions: dict  # candidate name -> predict()
    profile: ComponentProfile

    def report(self) -> str:
        """What was measured, what each candidate would take, and what was chosen and why."""
        p = self.profile
        inference = ", ".join(f"batch {b}: {s * 1e3:.2f} ms" for b, s in sorted(p.inference_s.items()))
        lines = [f"auto placement: profiled in {p.profile_s:.1f} s: simulator {p.sim_s * 1e3:.2f} ms per step of "
                 f"{p.envs} envs; inference {inference}; request + answer {p.message_s * 1e3:.2f} ms; update "
                 + ", ".join(f"{t} thread{'s' if t > 1 else ''}: {s:.3f} s" for t, s in sorted(p.update_s.items()))
                 + f"; weights {p.weight_bytes / 2 ** 20:.1f} MiB"]
        ranked = sorted(self.predictions.items(), key=lambda item: item[1]["iteration_s"])
        for name, figures in ranked:
            lines.append(f"  {name:<22} predicted {figures['iteration_s']:.3f} s/iteration (sampling "
                         f"{figures['sampling_s']:.3f}, update {figures['update_s']:.3f})")
        best = self.predictions[self.candidate.name]
        runner_up = ranked[1][1]["iteration_s"] if len(ranked) > 1 else best["iteration_s"]
        lines.append(f"  chose {self.candidate.describe()}: the shortest predicted iteration "
                     f"({runner_up / best['iteration_s']:.2f}x faster than the next)")
        return "\n".join(lines)


def choose(config, cluster=None, profile: ComponentProfile | None = None, cores: int | None = None) -> Choice:
    """Profile (unless ``profile`` is given; messages through a channel of ``cluster``) and pick the candidate
    with the shortest predicted iteration."""
    validate_auto_placement(config)
    cores = cores or config.placement.slots or os.cpu_count() or 1
    profile = profile or profile_components(config, cluster, cores)
    found = candidates(cores, config.env.envs_per_worker, disjoint_only=bool(config.rollout.max_staleness))
    if not found:
        raise ConfigError(f"rollout.max_staleness={config.rollout.max_staleness} needs sampling and training on "
                          f"slots of their own, and this machine has {cores} core")
    predictions = {c.name: predict(profile, c, config, cores) for c in found}
    best = min(found, key=lambda c: predictions[c.name]["iteration_s"])
    return Choice(best, predictions, profile)


def apply_choice(config, choice: Choice) -> None:
    """Set the chosen placement in ``config`` (recorded in the run's config: ``placement.auto`` off, the choice and
    its reason in ``placement.auto_report``)."""
    config.placement.components = dict(choice.candidate.components)
    config.env.pipeline_stages = choice.candidate.pipeline_stages
    config.rollout.inline = choice.candidate.inline
    config.placement.auto = False
    config.placement.auto_report = choice.report()


# --- the profile ----------------------------------------------------------------------------------------------


def profile_components(config, cluster, cores: int = 1) -> ComponentProfile:
    """Measure the components of ``config`` in this process on its first core (affinity and torch threads
    restored); messages through a channel of ``cluster``."""
    import sim_envs
    from embodied_rl.models import build_policy
    from embodied_rl.runners.setup import env_options, observation_spec, policy_size

    started = time.perf_counter()
    affinity, threads = os.sched_getaffinity(0), torch.get_num_threads()
    core = min(affinity)
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    E, W = config.env.envs_per_worker, config.env.num_workers
    envs = sim_envs.make(config.task, E, processes=False, seed=config.seed, **env_options(config))
    try:
        obs = envs.reset()
        shape = {k: v.shape[1:] for k, v in obs.items()} if isinstance(obs, dict) else obs.shape[1:]
        policy = build_policy(name=config.policy.name, action_dim=int(envs.single_action_shape[0]),
                              hidden_sizes=list(config.policy.hidden_sizes), init_log_std=config.policy.init_log_std,
                              **observation_spec(shape), **policy_size(config), **dict(config.policy.options))
        sim_s, obs = _time_simulator(envs, policy, obs)
        batches = sorted({max(1, E // 2), E, W * E})
        inference = {b: _time_inference(policy, _rows(obs, b)) for b in batches}
        message = _time_messages(cluster, config, obs, core)
        samples = W * E * config.rollout.steps_per_iteration // max(1, int(getattr(policy, "action_chunk", 1) or 1))
        update = {t: _time_update(policy, obs, samples, config.algorithm, sorted(affinity)[:t])
                  for t in sorted({1, min(2, cores, len(affinity))})}
        weight_bytes = sum(p.numel() * p.element_size() for p in policy.parameters())
    finally:
        envs.close()
        os.sched_setaffinity(0, affinity)
        torch.set_num_threads(threads)
    return ComponentProfile(E, sim_s, inference, message, update, weight_bytes, time.perf_counter() - started)


def _time_simulator(envs, policy, obs) -> tuple[float, object]:
    """Seconds per vector step with the policy's actions (one step per decision: a chunk's first action)."""
    def step(current):
        with torch.no_grad():
            actions = policy.act(_tensors(current))[0].numpy()
        return envs.step(actions[:, 0] if actions.ndim == 3 else actions).obs

    for _ in range(3):
        obs = step(obs)
    spent = 0.0
    for _ in range(PROFILE_STEPS):
        with torch.no_grad():
            actions = policy.act(_tensors(obs))[0].numpy()
        start = time.perf_counter()
        obs = envs.step(actions[:, 0] if actions.ndim == 3 else actions).obs
        spent += time.perf_counter() - start
    return spent / PROFILE_STEPS, obs


def _time_inference(policy, obs, repeats: int = 10) -> float:
    tensors = _tensors(obs)
    with torch.no_grad():
        policy.act(tensors)
        start = time.perf_counter()
        for _ in range(repeats):
            policy.act(tensors)
    return (time.perf_counter() - start) / repeats


def _time_update(policy, obs, samples: int, algorithm, on_cores: list[int]) -> float:
    """One round's update: ``update_epochs`` passes over ``samples`` rows in ``num_minibatches`` minibatches, each a
    forward (``evaluate``), backward and Adam step, with a torch thread on each of ``on_cores`` (the process pinned
    to them: more threads than cores spin against each other); timed on two minibatches and scaled."""
    import copy

    os.sched_setaffinity(0, set(on_cores))
    torch.set_num_threads(len(on_cores))
    trained = copy.deepcopy(policy).train()
    optimizer = torch.optim.Adam(trained.parameters(), lr=1e-6)
    rows = max(1, samples // max(1, algorithm.num_minibatches))
    batch = _tensors(_rows(obs, rows))
    with torch.no_grad():
        actions = trained.act(batch)[0]

    def minibatch():
        logp, entropy, values = trained.evaluate(batch, actions)
        optimizer.zero_grad()
        (-(logp.mean()) - entropy.mean() + values.pow(2).mean()).backward()
        optimizer.step()

    minibatch()  # warm-up
    start = time.perf_counter()
    for _ in range(2):
        minibatch()
    per_minibatch = (time.perf_counter() - start) / 2
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {on_cores[0]})
    return per_minibatch * max(1, algorithm.num_minibatches) * max(1, algorithm.update_epochs)


class _ChannelEcho:
    """The profile's peer on the run's channel (a Ray actor on the profiled core): answers each request with an
    action batch, as a rollout worker answers an env worker."""

    def __init__(self, channel, core: int):
        if hasattr(os, "sched_setaffinity") and core in os.sched_getaffinity(0):
            os.sched_setaffinity(0, {core})
        self.channel = channel
        self.channel.subscribe("requests")

    def serve(self, count: int, answer) -> int:
        for _ in range(count):
            self.channel.get("requests", timeout=60)
            self.channel.put(answer, "answers", timeout=60)
        return count


def _time_messages(cluster, config, obs, core: int, repeats: int = 100) -> float:
    """Seconds of one request (the observation batch) and its answer through the run's channel (its transport)
    between this process and a Ray actor, both on ``core``."""
    import ray

    from embodied_rl.runtime import Channel

    channel = Channel.create("auto-placement-profile", cluster, transport=config.channel_transport)
    channel.subscribe("answers")
    echo = ray.remote(num_cpus=0)(_ChannelEcho).remote(channel, core)
    try:
        answer = np.zeros((len(_first(obs)), 9), np.float32)
        served = echo.serve.remote(repeats + 5, answer)
        for index in range(repeats + 5):
            if index == 5:
                start = time.perf_counter()
            channel.put(obs, "requests", timeout=60)
            channel.get("answers", timeout=60)
        seconds = (time.perf_counter() - start) / repeats
        ray.get(served, timeout=60)
        return seconds
    finally:
        ray.kill(echo)
        channel.unsubscribe("answers")


def _first(obs):
    return next(iter(obs.values())) if isinstance(obs, dict) else obs


def _rows(obs, n: int):
    """``n`` rows of an observation batch, repeating its rows."""
    index = np.arange(n) % len(_first(obs))
    return {k: v[index] for k, v in obs.items()} if isinstance(obs, dict) else obs[index]


def _tensors(obs):
    if isinstance(obs, dict):
        return {k: torch.as_tensor(v) if v.dtype.kind in "biufc" else v for k, v in obs.items()}
    return torch.as_tensor(obs)
