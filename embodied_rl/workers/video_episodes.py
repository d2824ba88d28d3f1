"""Episodes for evaluation videos: deterministic episodes on an env that renders, one frame per simulator step.

The policy acts as in evaluation (deterministic, full-length episodes, terminations ignored), through the same
rollout-worker requests; an action chunk ``[N, K, A]`` is stepped one action at a time so every simulator step
gets its frame.

The rendering env is a separate env (training envs with state observations have no renderer), built for the call
and closed after it (building is cheap, < 1 s an env; on CPU the first frame of the worker's process costs ~25 s and
every frame after ~0.05-0.3 s by load: see sim_envs/maniskill/rendering.py).
It is built with a time limit one step past the episode length and stepped exactly ``episode_steps`` times, so no
episode ends inside it and the last frame shows the last state (an autoreset would show the next episode's first).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

import sim_envs


def record_episodes(task, env_options: dict, num_episodes: int, episode_steps: int, seed: int,
                    act: Callable[[np.ndarray], np.ndarray], size: int = 128) -> dict:
    """Run ``num_episodes`` episodes of ``episode_steps`` steps side by side and film them.

    task, env_options: as the env worker builds its envs (``sim_envs.make(task, n, **env_options)``).
    seed: episode i starts from ``seed + i``.
    act: ``obs [N, ...] -> actions [N, A] or chunks [N, K, A]`` (deterministic).
    size: frame width = height in pixels.

    Returns ``{"frames": uint8 [T + 1, N, H, W, 3], "success": bool [T + 1, N]}`` with T = ``episode_steps``:
    frame 0 is the initial state, frame t the state after step t, ``success[t]`` the task's success flag there
    (False at t = 0).
    """
    if num_episodes < 1 or episode_steps < 1:
        raise ValueError(f"num_episodes={num_episodes} and episode_steps={episode_steps} must be >= 1")
    options = dict(env_options, ignore_terminations=True, max_episode_steps=episode_steps + 1, render_size=size)
    env = sim_envs.make(task, num_episodes, processes=False, seed=seed, **options)
    if not callable(getattr(env, "render", None)):
        env.close()
        raise TypeError(f"the envs of task {getattr(task, 'name', task)!r} cannot render (no render())")
    try:
        obs = env.reset(seed=seed)
        frames, success = [env.render()], [np.zeros(num_episodes, bool)]
        while len(frames) <= episode_steps:
            actions = np.asarray(act(obs))
            chunk = actions[:, None] if actions.ndim == 2 else actions  # [N, K, A]
            for k in range(min(chunk.shape[1], episode_steps + 1 - len(frames))):
                batch = env.step(chunk[:, k])
                frames.append(env.render())
                success.append(np.asarray(batch.success, bool))
            obs = batch.obs
    finally:
        env.close()
    return {"frames": np.stack(frames), "success": np.stack(success)}
