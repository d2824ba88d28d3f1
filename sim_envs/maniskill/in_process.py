"""N ManiSkill CPU envs stepped one after another in the calling process (an env worker holds these)."""

from __future__ import annotations

import numpy as np

from sim_envs.maniskill.options import ManiSkillOptions
from sim_envs.maniskill.single import SingleCpuEnv
from sim_envs.vector_env import EpisodeTracker, StepBatch, copy_obs, group_leaders, set_obs_row, stack_obs


class InProcessManiSkillEnvs:
    """``num_envs`` single-scene CPU envs in this process, behind the ``VectorEnv`` interface."""

    holds_envs = True
    """``step(..., active=mask)`` leaves the envs outside ``mask`` as they are (see ``step``)."""

    def __init__(self, env_id: str, num_envs: int, options: ManiSkillOptions):
        self.env_id = env_id
        self.num_envs = num_envs
        self.options = options
        self.envs = [SingleCpuEnv(env_id, options) for _ in range(num_envs)]
        self.single_action_shape = self.envs[0].action_shape
        self.max_episode_steps = self.envs[0].max_episode_steps
        self.tracker = EpisodeTracker(num_envs)
        self.seed_stride = options.seed_stride or num_envs
        self._episode_seeds = [options.seed + i for i in range(num_envs)]
        self._rows: list = [None] * num_envs  # each env's current observation (what a held env shows)

    def reset(self, seed: int | None = None, state_ids: list[int] | None = None):
        if state_ids is not None and len(state_ids) != self.num_envs:
            raise ValueError(f"state_ids has {len(state_ids)} entries for {self.num_envs} envs")
        if seed is not None:
            self._episode_seeds = [seed + i for i in range(self.num_envs)]
        seeds = list(state_ids) if state_ids is not None else self._episode_seeds
        leaders = group_leaders(seeds)
        obs = []
        for i, env in enumerate(self.envs):
            obs.append(env.reset(seed=int(seeds[i])))
            if leaders[i] != i:
                # The shared seed gives envs of one id the leader's exact state where it decides the task's draw
                # (CPU); where it did not, the env takes a copy (exact up to ~1e-8 m of round-off in the robot's
                # root pose, which is why the seed goes first).
                state = self.envs[leaders[i]].get_state()
                if not _equal_states(env.get_state(), state):
                    obs[-1] = env.reset(seed=int(seeds[i]), state=state)
        self._advance_seeds()
        self.tracker.reset_all()
        self._rows = list(obs)
        return _stack_rows(obs)

    def reseed(self, seed: int, stride: int | None = None) -> None:
        """From their next episode on, env i takes seeds ``seed + i + k * stride`` (default stride: num_envs);
        the episodes running now go on."""
        self.seed_stride = stride or self.num_envs
        self._episode_seeds = [seed + i for i in range(self.num_envs)]

    def snapshot(self) -> dict:
        """Where every env stands, in plain lists (JSON-safe; floats exact): its episode's seed and actions so far,
        the seeds of its next episodes and its running episode stats. ``restore`` rebuilds the same states."""
        size = int(np.prod(self.single_action_shape))
        return {"episodes": [{"seed": env.episode_seed, "actions": np.asarray(env.episode_actions, np.float32)
                              .reshape(len(env.episode_actions), size).tolist()} for env in self.envs],
                "next_seeds": [int(s) for s in self._episode_seeds], "seed_stride": int(self.seed_stride),
                "returns": self.tracker.returns.tolist(), "lengths": self.tracker.lengths.tolist(),
                "success_once": self.tracker.success_once.tolist()}

    def restore(self, state: dict):
        """Rebuild the states of a ``snapshot`` (of envs of the same task and options) by replaying each env's
        episode from its seed; returns the current observation ``[N, ...]``."""
        if len(state["episodes"]) != self.num_envs:
            raise ValueError(f"snapshot of {len(state['episodes'])} envs restored into {self.num_envs}")
        obs = [env.replay(e["seed"], np.asarray(e["actions"], np.float32).reshape(-1, *self.single_action_shape))
               for env, e in zip(self.envs, state["episodes"])]
        self._episode_seeds = [int(s) for s in state["next_seeds"]]
        self.seed_stride = int(state["seed_stride"])
        self.tracker.returns[:] = np.asarray(state["returns"], np.float32)
        self.tracker.lengths[:] = np.asarray(state["lengths"], np.int64)
        self.tracker.success_once[:] = np.asarray(state["success_once"], bool)
        self._rows = list(obs)
        return _stack_rows(obs)

    def _advance_seeds(self) -> None:
        # Later episodes of env i continue a seed stream disjoint from the other envs' (and, with seed_stride set
        # to the total env count, from other workers' envs).
        self._episode_seeds = [s + self.seed_stride for s in self._episode_seeds]

    def step(self, actions: np.ndarray, observe: bool = True, active: np.ndarray | None = None) -> StepBatch:
        """See ``VectorEnv.step``; with ``observe=False`` camera envs skip rendering (the first observation of an
        episode started by the autoreset is always rendered). ``active`` ``[N]`` bool: only those envs step; the
        others are held (their observation as it was, reward 0, no end, no step counted)."""
        n = self.num_envs
        stride = self.seed_stride
        rewards = np.zeros(n, np.float32)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        success = np.zeros(n, bool)
        next_obs, final_rows = [], {}
        for i, env in enumerate(self.envs):
            if active is not None and not active[i]:
                next_obs.append(self._rows[i])
                continue
            obs, rewards[i], terminated[i], truncated[i], success[i] = env.step(actions[i], observe=observe)
            if terminated[i] or truncated[i]:
                final_rows[i] = obs
                obs = env.reset(seed=self._episode_seeds[i])
                self._episode_seeds[i] += stride
            next_obs.append(obs)
            self._rows[i] = obs
        self.tracker.record(rewards, success, active)
        done = terminated | truncated
        episodes = self.tracker.end(done, success)
        obs = _stack_rows(next_obs)
        final_obs = obs
        if final_rows:
            final_obs = copy_obs(obs)
            for i, row in final_rows.items():
                set_obs_row(final_obs, i, row)
        return StepBatch(obs, rewards, terminated, truncated, final_obs, success, episodes)

    def render(self) -> np.ndarray:
        """Each env's current scene: uint8 ``[N, H, W, 3]`` (built with ``render_size`` > 0). After a step that
        ended an episode, env i shows the first state of its next episode (same-step autoreset)."""
        return np.stack([env.render() for env in self.envs])

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _equal_states(a: dict, b: dict) -> bool:
    """Whether two ManiSkill state dicts hold the same tensors, bit for bit."""
    return a.keys() == b.keys() and all(
        _equal_states(a[k], b[k]) if isinstance(a[k], dict) else np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def _stack_rows(rows):
    return stack_obs([_expand(r) for r in rows])


def _expand(row):
    if isinstance(row, dict):
        return {k: v[None] for k, v in row.items()}
    return row[None]

