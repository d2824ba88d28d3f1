"""Steps inside an action chunk skip camera renders: state stays fresh, the chunk's last observation is rendered."""

from __future__ import annotations

import numpy as np

import sim_envs
from embodied_rl.workers.action_chunks import step_decision


def _camera_env():
    return sim_envs.make("maniskill_pushcube", 1, processes=False, obs_mode="rgb", image_size=32, seed=3)


def test_chunk_renders_once_and_matches_a_twin_that_renders_every_step():
    chunked, twin = _camera_env(), _camera_env()
    try:
        chunked.reset(seed=5)
        twin.reset(seed=5)
        cache = chunked.envs[0].sensor_cache
        renders_before = cache.renders
        chunk = np.random.default_rng(0).uniform(-1, 1, (1, 4, *chunked.single_action_shape)).astype(np.float32)
        batch, _ = step_decision(chunked, chunk)
        for k in range(4):
            twin_batch = twin.step(chunk[:, k])
        assert cache.renders - renders_before == 1  # only the chunk's last step rendered
        assert cache.reuses >= 3
        np.testing.assert_array_equal(batch.obs["state"], twin_batch.obs["state"])
        np.testing.assert_array_equal(batch.obs["rgb"], twin_batch.obs["rgb"])
        # An unobserved step repeats the last images but not the last state.
        before = batch.obs
        after = chunked.step(chunk[:, 0], observe=False).obs
        np.testing.assert_array_equal(after["rgb"], before["rgb"])
        assert not np.array_equal(after["state"], before["state"])
    finally:
        chunked.close()
        twin.close()
