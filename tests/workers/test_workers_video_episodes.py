"""Video episodes: one frame per simulator step, also when the policy acts in chunks, and no autoreset frame."""

import numpy as np

from embodied_rl.workers.video_episodes import record_episodes


def test_chunks_are_stepped_one_action_at_a_time_and_the_episode_ends_on_its_last_state():
    decisions = []

    def act(obs):  # chunks of 3 actions for 2 envs
        decisions.append(obs.copy())
        return np.full((len(obs), 3, 8), 0.3, np.float32)

    episodes = record_episodes("maniskill_pushcube", {}, num_episodes=2, episode_steps=7, seed=5, act=act, size=32)
    assert episodes["frames"].shape == (8, 2, 32, 32, 3) and episodes["success"].shape == (8, 2)
    assert len(decisions) == 3  # steps 0-2, 3-5, and 6 (the last chunk is cut at the episode's end)
    assert not episodes["success"][0].any()
    # the last frame shows the moved arm, not a reset scene
    assert np.abs(episodes["frames"][-1].astype(int) - episodes["frames"][0]).mean() > 0.5
