"""ManiSkill's batched GPU simulation behind the same VectorEnv interface (runs where CUDA exists)."""

import numpy as np
import pytest
import torch

import sim_envs

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device for PhysX GPU")]


def test_gpu_batched_env_steps_resets_and_reports_truncation():
    env = sim_envs.make("maniskill_pushcube", 16, backend="gpu", max_episode_steps=5)
    try:
        obs = env.reset(seed=0)
        assert obs.shape[0] == 16
        for _ in range(4):
            batch = env.step(np.zeros((16, *env.single_action_shape), np.float32))
            assert not batch.truncated.any()
        batch = env.step(np.zeros((16, *env.single_action_shape), np.float32))
        assert batch.truncated.all() and batch.episodes.done.all()
        assert not np.allclose(batch.obs, batch.final_obs)
        same = env.reset(state_ids=[3] * 16)
        np.testing.assert_allclose(same[0], same[1], atol=1e-5)
    finally:
        env.close()
