"""Env worker: owns simulator envs, asks rollout workers for actions through a channel (or, with an inline policy,
computes them in its own process), emits trajectories."""

from __future__ import annotations

import time

import numpy as np
import ray

import sim_envs
from embodied_rl.workers.action_chunks import step_decision
from embodied_rl.workers.messages import (REQUESTS_KEY, TRAJECTORIES_KEY, PolicyRequest, PolicyResponse,
                                          ResendRequest, responses_key)
from embodied_rl.workers.policy_server import PolicyHolder, PolicyServer
from embodied_rl.workers.trajectory_buffer import TrajectoryBuffer, merge_stages
from embodied_rl.workers.video_episodes import record_episodes
from embodied_rl.runtime import Worker
from sim_envs.vector_env import obs_rows


SAMPLE_STREAMS = {"eval": 1}
"""Extra seed entropy that separates an evaluation request's sampling stream from training's."""

ANSWER_TIMEOUT_S = 600.0
"""How long an env worker waits for the answer to one request before it fails (the driver then replaces it):
far longer than any forward pass, so only a rollout side that hangs without dying reaches it. Runs pass three times
``fault.hang_timeout_s``: the driver finds a hung rollout worker within one and replaces it (a process start,
seconds, longer on starved cores; with twice, env workers beside a busy test run timed out first), and this worker
then resends."""

PUT_TIMEOUT_S = 300.0
"""How long an env worker's trajectory may wait for the actor's channel (runs pass ``fault.hang_timeout_s``)."""


class EnvWorker(PolicyHolder, Worker):
    """Steps ``envs_per_worker`` envs of ``task``; env i of rank r (global index g = r * k + i) starts from seed
    ``seed + g`` and its later episodes take ``seed + g + j * N`` (N = ``total_envs``): no two envs of the run
    ever share an initial state. Evaluations start from the initial states the driver names (``evaluate``).

    With ``pipeline_stages`` S > 1 the envs form S groups: while a rollout worker computes actions for one
    group, this worker steps the next, so simulation and inference overlap.

    ``seeded_sampling``: every request carries a seed derived from (seed, rank, stage, request number), so the
    actions of a run depend only on its seed (see ``PolicyRequest.sample_seed``).

    ``policy`` (``rollout.inline``): this worker holds its own inference copy of the policy (a ``PolicyServer`` on
    its device) and answers its own requests in process, as RLinf's collocated env + rollout does: no channel
    round trip and no process switch per step. It then takes the rollout workers' weight calls (``PolicyHolder``).
    """

    CONCURRENCY_GROUPS = {"heartbeat": 1}  # ``heartbeat`` answers while a round runs

    @classmethod
    def prepare_process(cls, task=None, env_options: dict | None = None, **worker_kwargs) -> None:
        """A standby process (``WorkerGroup``'s ``standby``) imports the simulator ahead of need: it builds one env of
        ``task`` on the CPU and closes it (no GPU touched before the rank's constructor picks its devices)."""
        super().prepare_process(**worker_kwargs)
        if task is not None:
            options = dict(env_options or {}, backend="cpu")
            options.pop("seed_stride", None)
            sim_envs.make(task, 1, processes=False, seed=0, **options).close()

    def __init__(self, task: str | sim_envs.TaskEntry, envs_per_worker: int, env_options: dict, channel,
                 seed: int = 0, pipeline_stages: int = 1, group_size: int | None = None, total_envs: int = 0,
                 action_chunk: int = 1, incarnation: int = 0, answer_timeout_s: float = ANSWER_TIMEOUT_S,
                 seeded_sampling: bool = False, put_timeout_s: float = PUT_TIMEOUT_S, store_next_obs: bool = False,
                 policy: dict | None = None, **kwargs):
        self.started_at = time.time()  # the process runs this constructor (start-up breakdown: ``counters``)
        super().__init__(**kwargs)
        if not 1 <= pipeline_stages <= envs_per_worker:
            raise ValueError(f"pipeline_stages={pipeline_stages} must be between 1 and envs_per_worker="
                             f"{envs_per_worker}")
        self.task = task
        self.action_chunk = action_chunk  # simulator steps per policy decision
        self.store_next_obs = store_next_obs  # trajectories carry next_obs (off-policy learners)
        self.channel = channel
        self.num_envs = envs_per_worker
        self.env_options = dict(env_options, seed_stride=max(total_envs, envs_per_worker))
        sizes = [len(part) for part in np.array_split(np.arange(envs_per_worker), pipeline_stages)]
        first = seed + self.rank * envs_per_worker
        offsets = np.cumsum([0, *sizes[:-1]])
        self.stages = [sim_envs.make(task, n, processes=False, seed=first + int(o), **self.env_options)
                       for n, o in zip(sizes, offsets)]
        self.stage_obs = [env.reset() for env in self.stages]
        self.envs_built_at = time.time()
        # evaluation envs by (time limit, out-of-distribution split); None: the training envs' limit, no split
        self.eval_envs: dict[tuple[int | None, str | None], object] = {}
        # of the round so far (pop_seconds); ``inferring_s``: the inline policy's forward passes
        self.seconds = {"simulating_s": 0.0, "waiting_for_actions_s": 0.0, "inferring_s": 0.0}
        # Grouped resets (GRPO): env g of all ``total_envs`` (g = rank * envs_per_worker + i) belongs to group
        # g // group_size; every episode of a group starts from one shared initial state: its envs share a seed
        # (group_state_ids), and in one stage they start from a copy of the first one's state where the seed does
        # not decide it (the GPU simulator draws a whole batch from one seed). Envs of a group in other stages or
        # workers rely on the seed alone: exact on CPU, not on the GPU simulator.
        self.group_size = group_size
        self.num_groups = total_envs // group_size if group_size else 0
        self.stage_offsets = [int(o) for o in offsets]
        self.stage_envs = [first - seed + int(o) + np.arange(n) for n, o in zip(sizes, offsets)]
        self.seed = seed
        self.group_episodes = [0] * len(self.stages)  # grouped episodes each stage has started
        self.incarnation = incarnation  # replacements of this rank so far (see responses_key)
        self.answer_timeout_s = answer_timeout_s
        self.put_timeout_s = put_timeout_s
        self.waiting_on_peer = False  # waiting for a rollout worker's answer or the actor's channel (``heartbeat``)
        self.last_requests: list[PolicyRequest | None] = [None] * len(self.stages)
        self.sequence = 0  # every request this worker sent (answers are matched on it)
        self.sample_requests = {"train": 0, "eval": 0}  # requests per purpose: each purpose seeds its own stream
        self.seeded_sampling = seeded_sampling
        self.resent = 0  # requests sent again after a rollout worker died
        self.steps_simulated = 0  # training steps (``interact``) of all envs of this worker
        self.first_step_at: float | None = None  # wall-clock time (time.time) of its first simulator step
        self.server: PolicyServer | None = None  # the inline policy (``hold_policy``)
        self.inline_answers: list[PolicyResponse | None] = [None] * len(self.stages)
        for stage in range(len(self.stages)):
            self.channel.subscribe(responses_key(self.rank, stage, incarnation))
        if policy is not None:
            self.hold_policy(policy)

    def hold_policy(self, policy: dict) -> None:
        """From now on answer this worker's own requests with an inline copy of ``policy`` (``build_policy``'s
        keyword arguments; random weights until ``load_weights`` or ``receive_weights``) instead of the rollout
        workers'. The run learns the policy's shapes from the first env worker, so the first workers get it here
        and later ones (replacements, resizes) at construction."""
        self.server = PolicyServer(policy, self.device, self.rank)
        self.leave()

    def counters(self) -> dict:
        """``steps_simulated`` (env steps of training rounds), ``first_step_at`` (time.time of the first),
        ``started_at`` (time.time its constructor began: the process was up) and ``envs_built_at`` (its envs were
        built and reset)."""
        return {"steps_simulated": self.steps_simulated, "first_step_at": self.first_step_at,
                "started_at": self.started_at, "envs_built_at": self.envs_built_at}

    @ray.method(concurrency_group="heartbeat")
    def heartbeat(self) -> dict:
        """Answered from a thread of its own while ``interact`` or ``evaluate`` runs (a stopped or wedged process
        does not answer): ``progress`` grows with every request and simulator step; ``waiting`` is true while this
        worker waits for a rollout worker's answer or for the actor's channel (no progress then is not its own)."""
        return {"progress": self.sequence + self.steps_simulated, "waiting": self.waiting_on_peer}

    def leave(self) -> None:
        """Before this worker is removed (the run scales down): stop reading its answer keys."""
        for stage in range(len(self.stages)):
            self.channel.unsubscribe(responses_key(self.rank, stage, self.incarnation))

    def observation_shape(self):
        obs = self.stage_obs[0]
        if isinstance(obs, dict):
            return {k: v.shape[1:] for k, v in obs.items()}
        return obs.shape[1:]

    def action_shape(self):
        return self.stages[0].single_action_shape

    def _request(self, stage: int, obs, final_obs, deterministic=False, want_actions=True,
                 purpose: str = "train") -> None:
        """Ask for this stage's actions. ``purpose`` (``train`` or ``eval``, videos included) picks the request
        counter that seeds sampled actions: evaluations draw from a stream of their own, so when (or whether) a run
        evaluates never changes what it trains."""
        self.sequence += 1
        self.sample_requests[purpose] += 1
        sample_seed = None
        if self.seeded_sampling:
            entropy = [self.seed, self.rank, stage, self.sample_requests[purpose]]
            if purpose != "train":  # a disjoint stream (training keeps the seeds of earlier versions)
                entropy.append(SAMPLE_STREAMS[purpose])
            sample_seed = int(np.random.SeedSequence(entropy).generate_state(1)[0])
        request = PolicyRequest(self.rank, obs, final_obs, deterministic, want_actions, stage, self.incarnation,
                                self.sequence, sample_seed)
        self.last_requests[stage] = request
        if self.server is None:
            self.channel.put(request, REQUESTS_KEY)
            return
        start = time.perf_counter()
        self.inline_answers[stage] = self.server.answer([request])[0]
        self.seconds["inferring_s"] += time.perf_counter() - start

    def _response(self, stage: int):
        """The answer to this stage's latest request. A ``ResendRequest`` (a rollout worker died, maybe holding
        that request) sends it again; answers to earlier requests (a resent one answered twice) are dropped.
        With an inline policy: the answer ``_request`` computed."""
        if self.server is not None:
            answer, self.inline_answers[stage] = self.inline_answers[stage], None
            return answer
        start = time.perf_counter()
        wanted = self.last_requests[stage]
        self.waiting_on_peer = True
        while True:
            item = self.channel.get(responses_key(self.rank, stage, self.incarnation), timeout=self.answer_timeout_s)
            if isinstance(item, ResendRequest):
                self.channel.refresh()  # the dead reader may still be cached
                self.channel.put(wanted, REQUESTS_KEY)
                self.resent += 1
            elif item.sequence == wanted.sequence:
                break
        self.waiting_on_peer = False
        self.seconds["waiting_for_actions_s"] += time.perf_counter() - start
        return item

    def pop_seconds(self) -> dict:
        """Seconds spent stepping simulators and waiting for actions since the last call or the start of the latest
        round (``interact``), whichever is later."""
        seconds, self.seconds = self.seconds, dict.fromkeys(self.seconds, 0.0)
        return seconds

    def group_state_ids(self, stage: int) -> list[int]:
        """Initial-state ids of this stage's envs for their next grouped episode: equal within a group, different
        across groups and episodes (also when a group spans env workers)."""
        groups = self.stage_envs[stage] // self.group_size
        return [int(self.seed + self.group_episodes[stage] * self.num_groups + g) for g in groups]

    def relayout(self, seed: int, total_envs: int) -> None:
        """The run's env workers were resized to ``total_envs`` envs in all: from their next episodes on, this
        worker's envs take the seed streams of a worker built with ``seed`` and ``total_envs`` (fresh states, and
        disjoint across the resized set); grouped resets count groups of the new total."""
        first = seed + self.rank * self.num_envs
        for env, offset in zip(self.stages, self.stage_offsets):
            env.reseed(first + offset, total_envs)
        self.env_options["seed_stride"] = total_envs
        self.seed = seed
        self.num_groups = total_envs // self.group_size if self.group_size else 0

    def snapshot(self) -> dict | None:
        """Where this worker stands between rounds, in plain lists (a checkpoint's ``env_state.json``): every
        env's episode so far (seed and actions), seed streams, grouped-episode and evaluation counters, request
        number. None when its envs cannot say (GPU-simulated or subprocess envs)."""
        if not all(hasattr(env, "snapshot") for env in self.stages):
            return None
        return {"layout": self._layout(), "stages": [env.snapshot() for env in self.stages],
                "seed": self.seed, "group_episodes": list(self.group_episodes),
                "sequence": self.sequence, "sample_requests": dict(self.sample_requests),
                "steps_simulated": self.steps_simulated}

    def _layout(self) -> dict:
        return {"rank": self.rank, "envs": self.num_envs, "stages": len(self.stages),
                "seed_stride": self.env_options["seed_stride"]}

    def restore(self, state: dict) -> None:
        """Continue from a ``snapshot`` of the worker of this rank in the same layout: the same env states (each
        episode replayed from its seed), seeds and counters, so the next round is the one that would have run."""
        if state["layout"] != self._layout():
            raise ValueError(f"env worker {self.rank}: snapshot of layout {state['layout']}, this worker has "
                             f"{self._layout()}")
        self.stage_obs = [env.restore(s) for env, s in zip(self.stages, state["stages"])]
        self.seed = int(state["seed"])
        self.group_episodes = [int(e) for e in state["group_episodes"]]
        self.sequence = int(state["sequence"])
        # Checkpoints from before evaluations had their own stream counted every request as training's.
        self.sample_requests = {k: int(v) for k, v in state.get("sample_requests",
                                                                {"train": state["sequence"], "eval": 0}).items()}
        self.steps_simulated = int(state["steps_simulated"])

    def group_progress(self) -> list[int]:
        """Grouped episodes each stage has started (a replacement of a worker continues from its partners')."""
        return list(self.group_episodes)

    def set_group_progress(self, episodes: list[int]) -> None:
        self.group_episodes = [int(e) for e in episodes]

    def _reset_group_stage(self, stage: int):
        obs = self.stages[stage].reset(state_ids=self.group_state_ids(stage))
        self.group_episodes[stage] += 1
        return obs

    def interact(self, num_steps: int, sampling_round: int | None = None) -> list[dict]:
        """Run ``num_steps`` simulator steps, put a ``Trajectory`` on the channel, return stats of finished episodes.
        ``sampling_round``: the driver's number of this round, carried by the trajectory (the actor trains a round
        only on trajectories of that round).

        A policy with action chunks of K steps decides every K steps: the trajectory holds ``num_steps / K``
        decisions, each with its chunk ``[K, A]`` and the chunk's summed reward.

        With grouped resets, ``num_steps`` is a multiple of the episode length (envs ignore terminations, so every
        env ends its episodes together) and every episode starts from its group's shared initial state.
        """
        if num_steps % self.action_chunk:
            raise ValueError(f"num_steps={num_steps} is not a multiple of the action chunk {self.action_chunk}")
        self.channel.refresh()  # rollout workers may have joined or left since the last round
        self.seconds = dict.fromkeys(self.seconds, 0.0)  # pop_seconds measures this round, not evaluations before
        T, stages = num_steps // self.action_chunk, range(len(self.stages))
        if self.group_size:
            self.stage_obs = [self._reset_group_stage(s) for s in stages]
        chunk = (self.action_chunk,) if self.action_chunk > 1 else ()
        buffers = [TrajectoryBuffer(T, self.stage_obs[s], (*chunk, *self.action_shape()), self.store_next_obs)
                   for s in stages]
        pending = [None] * len(self.stages)  # (step, env indices) whose final-observation values come next
        episodes: list[dict] = []
        for s in stages:
            self._request(s, self.stage_obs[s], None)
        for t in range(T + 1):
            for s in stages:
                response = self._response(s)
                if pending[s] is not None:
                    step, index = pending[s]
                    buffers[s].final_values[step, index] = response.final_values
                    pending[s] = None
                if t == T:
                    buffers[s].next_value[:] = response.values
                    continue
                buffers[s].record_policy(t, self.stage_obs[s], response)
                start = time.perf_counter()
                if self.first_step_at is None:
                    self.first_step_at = time.time()
                batch, finished = step_decision(self.stages[s], response.actions)
                self.seconds["simulating_s"] += time.perf_counter() - start
                self.steps_simulated += len(response.actions) * self.action_chunk
                buffers[s].record_step(t, batch)
                episodes.extend(stats for _, stats in finished)
                ended = np.flatnonzero(batch.truncated | batch.terminated)
                if len(ended):
                    pending[s] = (t, ended)
                next_obs = batch.obs
                if self.group_size and batch.truncated.all() and t + 1 < T:
                    next_obs = self._reset_group_stage(s)  # in place of the autoreset's ungrouped initial state
                self.stage_obs[s] = next_obs
                self._request(s, next_obs, obs_rows(batch.final_obs, ended) if len(ended) else None,
                              want_actions=t + 1 < T)
        trajectory = merge_stages([b.to_trajectory(self.rank) for b in buffers], self.rank)
        trajectory.sampling_round = sampling_round
        self.waiting_on_peer = True
        self.channel.put(trajectory, TRAJECTORIES_KEY, timeout=self.put_timeout_s)
        self.waiting_on_peer = False
        return episodes

    def evaluate(self, state_ids: list[int], num_workers: int = 1, deterministic: bool = True,
                 max_episode_steps: int | None = None, split: str | None = None) -> list[dict]:
        """One episode from each initial state of this worker's share of ``state_ids`` (every ``num_workers``-th,
        from its rank on), run to the time limit (``max_episode_steps``; None: the training envs' limit) with
        deterministic (or sampled) actions. Each result carries its ``state_id``: the set of states, and so a
        deterministic evaluation's result, does not depend on how many workers or envs share it. ``split``: an
        out-of-distribution split of the task (``ood_split``; None: in distribution).

        The envs take the states ``envs_per_worker`` at a time; in a last, partial batch the spare envs repeat a
        state and are not counted."""
        env = self._eval_env(max_episode_steps, split)
        self.channel.refresh()  # rollout workers may have joined or left since the last round
        mine = [int(i) for i in state_ids[self.rank::num_workers]]
        finished: list[dict] = []
        for start in range(0, len(mine), self.num_envs):
            ids = mine[start:start + self.num_envs]
            obs = env.reset(state_ids=ids + [ids[-1]] * (self.num_envs - len(ids)))
            results: dict[int, dict] = {}
            while len(results) < len(ids):
                self._request(0, obs, None, deterministic=deterministic, purpose="eval")
                batch, ended = step_decision(env, self._response(0).actions)
                for i, stats in ended:
                    if i < len(ids) and i not in results:
                        results[i] = dict(stats, state_id=ids[i])
                obs = batch.obs
            finished.extend(results[i] for i in range(len(ids)))
        return finished

    def _eval_env(self, max_episode_steps: int | None, split: str | None = None):
        key = (max_episode_steps, split)
        if key not in self.eval_envs:
            options = dict(self.env_options, ignore_terminations=True)
            if max_episode_steps is not None:
                options["max_episode_steps"] = max_episode_steps
            if split is not None:
                options["ood_split"] = split
            self.eval_envs[key] = sim_envs.make(self.task, self.num_envs, processes=False, seed=0, **options)
        return self.eval_envs[key]

    def record_video(self, num_episodes: int, size: int = 128) -> dict:
        """Film ``num_episodes`` deterministic full-length episodes on a separate env that renders ``size`` px
        frames: ``{"frames": uint8 [T + 1, N, H, W, 3], "success": bool [T + 1, N]}`` (workers/video_episodes.py).
        The same initial states at every call (seeds fixed per rank): videos of one run compare across iterations."""
        self.channel.refresh()

        def act(obs):
            self._request(0, obs, None, deterministic=True, purpose="eval")
            return self._response(0).actions

        return record_episodes(self.task, self.env_options, num_episodes, self.stages[0].max_episode_steps,
                               20_000_000 + self.seed + self.rank * self.num_envs, act, size)

    def close(self) -> None:
        for env in self.stages:
            env.close()
        for env in self.eval_envs.values():
            env.close()

