"""``embodied-rl bench render``: camera env steps/s when every step renders vs when only the observation after
each action chunk does (what env workers do for a chunked policy: steps inside a chunk are not looked at).

One process, one ManiSkill CPU env per variant, rgb observations; the variants are measured alternately in one run
and stepped with the same random chunks, so the ratio is what skipping the renders buys on this machine.
"""

from __future__ import annotations

import time

import numpy as np

from embodied_rl.bench import print_report, require_at_least_one


def _steps_per_s(env, chunks: np.ndarray, observe_inside: bool) -> float:
    """Run ``chunks`` ``[D, N, K, A]`` decision by decision; ``observe_inside``: render every step (else only the
    last step of each chunk)."""
    start = time.perf_counter()
    for chunk in chunks:
        for k in range(chunk.shape[1]):
            env.step(chunk[:, k], observe=observe_inside or k == chunk.shape[1] - 1)
    return chunks.shape[0] * chunks.shape[1] * chunks.shape[2] / (time.perf_counter() - start)


def run_render_bench(task: str, chunk: int, image_size: int, decisions: int, repeats: int, as_json: bool) -> int:
    import sim_envs

    require_at_least_one(chunk=chunk, image_size=image_size, decisions=decisions, repeats=repeats)
    env = sim_envs.make(task, 1, processes=False, obs_mode="rgb", image_size=image_size, seed=0)
    try:
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        shape = (decisions, env.num_envs, chunk, *env.single_action_shape)
        _steps_per_s(env, rng.uniform(-1, 1, (2, *shape[1:])).astype(np.float32), True)  # warm-up (pipelines)
        every, chunked = [], []
        for _ in range(repeats):
            chunks = rng.uniform(-1, 1, shape).astype(np.float32)
            every.append(_steps_per_s(env, chunks, True))
            chunked.append(_steps_per_s(env, chunks, False))
    finally:
        env.close()
    result = {"task": task, "obs_mode": "rgb", "image_size": image_size, "action_chunk": chunk,
              "steps_per_repeat": decisions * chunk, "repeats": repeats,
              "render_every_step_steps_per_s": [round(r, 1) for r in every],
              "render_after_chunk_steps_per_s": [round(r, 1) for r in chunked],
              "render_every_step_median": round(float(np.median(every)), 1),
              "render_after_chunk_median": round(float(np.median(chunked)), 1)}
    result["ratio_after_chunk_over_every_step"] = round(result["render_after_chunk_median"]
                                                        / result["render_every_step_median"], 3)
    print_report(result, as_json)
    return 0
