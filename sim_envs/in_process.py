"""N single-scene envs stepped one after another in the calling process, behind the ``VectorEnv`` interface.

Any simulator family whose env can be built one scene at a time gets its vector env here: it provides a
``SingleEnv`` (below) and passes a list of them. Env i starts from seed ``seed + i``; its later episodes take
``seed + i + k * seed_stride``. The autoreset is same-step (``vector_env.py``).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from sim_envs.vector_env import EpisodeTracker, StepBatch, copy_obs, group_leaders, set_obs_row, stack_obs


class SingleEnv(Protocol):
    """One scene. Observations are unbatched: a vector ``[D]`` or a dict of arrays (``{"rgb": [H, W, 3],
    "state": [D]}``)."""

    action_shape: tuple[int, ...]
    max_episode_steps: int
    episode_seed: int | None
    """The seed of the running episode (None before the first reset)."""
    episode_actions: list
    """The (clipped) actions ``[A]`` taken since its reset: with the seed, enough to rebuild its state."""

    def reset(self, seed: int | None = None):
        """Start the episode of ``seed``; returns its first observation."""

    def step(self, action: np.ndarray, observe: bool = True):
        """``action [A]`` -> (obs, reward float, terminated bool, truncated bool, success bool); ``observe=False``
        may repeat the last camera image instead of rendering."""

    def replay(self, seed: int, actions: np.ndarray):
        """Rebuild an episode from its seed and actions ``[t, A]``; returns the observation after the last one."""

    def render(self) -> np.ndarray:
        """uint8 ``[H, W, 3]`` of the current scene (an env built to render)."""

    def close(self) -> None: ...


class InProcessEnvs:
    """``len(envs)`` single envs in this process. A family whose seed does not fully decide the initial state
    (ManiSkill's CPU sim: a reset may differ in round-off) gives its single envs ``align_with(leader, seed)``, which
    makes an env that shares its seed with an earlier one (a GRPO group) start from that leader's exact state and
    returns the new observation (None: already equal)."""

    holds_envs = True
    """``step(..., active=mask)`` leaves the envs outside ``mask`` as they are (see ``step``)."""

    def __init__(self, envs: list, seed: int = 0, seed_stride: int = 0):
        self.envs = envs
        self.num_envs = len(envs)
        self.single_action_shape = tuple(envs[0].action_shape)
        self.max_episode_steps = envs[0].max_episode_steps
        self.tracker = EpisodeTracker(self.num_envs)
        self.seed_stride = seed_stride or self.num_envs
        self._episode_seeds = [seed + i for i in range(self.num_envs)]
        self._rows: list = [None] * self.num_envs  # each env's current observation (what a held env shows)

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
            if leaders[i] != i and hasattr(env, "align_with"):
                aligned = env.align_with(self.envs[leaders[i]], int(seeds[i]))
                if aligned is not None:
                    obs[-1] = aligned
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
        """Each env's current scene: uint8 ``[N, H, W, 3]`` (built to render). After a step that ended an episode,
        env i shows the first state of its next episode (same-step autoreset)."""
        return np.stack([env.render() for env in self.envs])

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _stack_rows(rows):
    return stack_obs([_expand(r) for r in rows])


def _expand(row):
    if isinstance(row, dict):
        return {k: v[None] for k, v in row.items()}
    return row[None]
