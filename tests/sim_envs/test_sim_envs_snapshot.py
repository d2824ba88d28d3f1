"""A snapshot of in-process ManiSkill envs, restored into new envs, continues exactly as the originals do."""

import json

import numpy as np
import pytest

import sim_envs


def _steps(env, actions):
    """Observations, rewards, dones and episode returns of stepping ``env`` through ``actions`` ``[t, N, A]``."""
    out = []
    for a in actions:
        b = env.step(a)
        obs = b.obs if not isinstance(b.obs, dict) else np.concatenate([v.reshape(len(a), -1) for v in b.obs.values()], 1)
        out.append((obs.copy(), b.rewards.copy(), b.truncated.copy(), b.episodes.episode_return.copy()))
    return out


@pytest.mark.parametrize("obs_mode", ["state", "rgb"])
def test_restored_envs_step_exactly_like_the_originals(obs_mode):
    options = dict(max_episode_steps=7, obs_mode=obs_mode, image_size=16) if obs_mode == "rgb" else dict(
        max_episode_steps=7)
    original = sim_envs.make("maniskill_pushcube", 2, processes=False, seed=3, **options)
    original.reset()
    rng = np.random.default_rng(0)
    a = original.single_action_shape
    for action in rng.uniform(-1, 1, (9, 2, *a)).astype(np.float32):  # into the second episode of each env
        original.step(action)
    snapshot = json.loads(json.dumps(original.snapshot()))  # as a checkpoint stores it
    restored = sim_envs.make("maniskill_pushcube", 2, processes=False, seed=99, **options)
    restored.reset()
    restored.restore(snapshot)
    later = rng.uniform(-1, 1, (8, 2, *a)).astype(np.float32)  # past the next episode end and autoreset
    expected, got = _steps(original, later), _steps(restored, later)
    assert any(done.any() for _, _, done, _ in expected)
    for (o1, r1, d1, g1), (o2, r2, d2, g2) in zip(expected, got):
        assert np.array_equal(o1, o2) and np.array_equal(r1, r2) and np.array_equal(d1, d2)
        assert np.array_equal(g1, g2)  # returns of episodes that straddle the snapshot
    original.close()
    restored.close()
