"""Executing one policy decision on a vector env: a single action ``[N, A]`` or an action chunk ``[N, K, A]`` run
open loop for K simulator steps (as OpenVLA-OFT and Pi0 policies act)."""

from __future__ import annotations

import numpy as np

from sim_envs.vector_env import EpisodeStats, StepBatch, copy_obs, obs_rows, set_obs_row


def finished_episodes(episodes: EpisodeStats) -> list[tuple[int, dict]]:
    """``(env index, stats)`` of every episode that ended at one simulator step."""
    e = episodes
    return [(int(i), dict(episode_return=float(e.episode_return[i]), episode_length=int(e.episode_length[i]),
                          success_once=bool(e.success_once[i]), success_at_end=bool(e.success_at_end[i])))
            for i in np.flatnonzero(e.done)]


def step_decision(env, actions: np.ndarray) -> tuple[StepBatch, list[tuple[int, dict]]]:
    """Run one decision: ``actions`` ``[N, A]`` (one step) or ``[N, K, A]`` (K steps, open loop).

    Returns the decision's StepBatch and the episodes that ended during it. For a chunk, rewards are summed and
    success / terminated / truncated OR-ed over an env's steps up to the end of its episode; ``final_obs`` holds the
    last observation of an episode that ended inside the chunk; ``obs`` is the observation after the chunk. An env
    whose episode ends inside a chunk is held for the chunk's remaining steps (envs with ``holds_envs``: the
    in-process CPU envs), so its next episode starts at the next decision, from its first observation; envs that
    cannot hold one env of a batch (GPU-simulated, subprocess envs) run the remaining actions in the next episode
    (their rewards are not counted). With lock-step episodes whose length is a multiple of K this never arises.
    """
    if actions.ndim == 2:
        batch = env.step(actions)
        return batch, finished_episodes(batch.episodes)
    n = actions.shape[0]
    rewards = np.zeros(n, np.float32)
    terminated, truncated, success = (np.zeros(n, bool) for _ in range(3))
    ended = np.zeros(n, bool)
    final_rows: dict[int, object] = {}
    finished: list[tuple[int, dict]] = []
    batch = None
    for k in range(actions.shape[1]):
        # Only the observation after the chunk is looked at: steps inside it may skip rendering cameras.
        hold = {"active": ~ended} if ended.any() and getattr(env, "holds_envs", False) else {}
        batch = env.step(actions[:, k], observe=k == actions.shape[1] - 1, **hold)
        live = ~ended
        rewards[live] += batch.rewards[live]
        terminated |= batch.terminated & live
        truncated |= batch.truncated & live
        success |= batch.success & live
        finished.extend(finished_episodes(batch.episodes))
        for i in np.flatnonzero((batch.terminated | batch.truncated) & live):
            final_rows[int(i)] = copy_obs(obs_rows(batch.final_obs, i))
        ended |= batch.terminated | batch.truncated
    final_obs = batch.obs
    if final_rows:
        final_obs = copy_obs(batch.obs)
        for i, row in final_rows.items():
            set_obs_row(final_obs, i, row)
    return StepBatch(batch.obs, rewards, terminated, truncated, final_obs, success, batch.episodes), finished

