"""An action chunk runs open loop for K simulator steps: rewards summed to the episode's end, ends and final
observations kept, the rest of a chunk not run into the next episode, compared with the same actions stepped one
at a time on a twin env."""

import numpy as np

import sim_envs
from embodied_rl.workers.action_chunks import step_decision


def test_a_chunk_equals_its_steps_one_by_one_up_to_the_episode_end():
    options = dict(processes=False, max_episode_steps=6, seed=3)
    chunked, twin = sim_envs.make("maniskill_pushcube", 2, **options), sim_envs.make("maniskill_pushcube", 2, **options)
    try:
        chunked.reset(), twin.reset()
        actions = np.random.default_rng(0).uniform(-1, 1, (2, 2, 4, 8)).astype(np.float32)  # 2 decisions of 4 steps
        singles = [twin.step(actions[d, :, k]) for d in range(2) for k in range(4)]
        first, ended_first = step_decision(chunked, actions[0])
        second, ended_second = step_decision(chunked, actions[1])

        np.testing.assert_allclose(first.rewards, sum(s.rewards for s in singles[:4]), rtol=1e-5)
        assert not (first.terminated | first.truncated).any() and not ended_first
        # The 6-step episodes end at the second step of the second chunk: only steps 5 and 6 count.
        np.testing.assert_allclose(second.rewards, singles[4].rewards + singles[5].rewards, rtol=1e-5)
        assert second.truncated.all()
        np.testing.assert_allclose(second.final_obs, singles[5].final_obs, rtol=1e-5)
        # The rest of the chunk is not run into the next episode: the env is held at its first observation (the
        # twin's after its step 6, which autoreset), and the next decision starts there.
        np.testing.assert_allclose(second.obs, singles[5].obs, rtol=1e-5)
        assert not np.allclose(second.obs, singles[7].obs, rtol=1e-3)
        assert sorted(i for i, _ in ended_second) == [0, 1]
        assert all(stats["episode_length"] == 6 for _, stats in ended_second)
        step_decision(chunked, actions[1])  # the next episode counts only the steps it took
        assert chunked.tracker.lengths.tolist() == [4, 4]
    finally:
        chunked.close(), twin.close()


def test_what_a_policy_stores_of_its_decision_joins_the_recorded_observation():
    from embodied_rl.workers.messages import PolicyResponse
    from embodied_rl.workers.trajectory_buffer import TrajectoryBuffer

    first = {"state": np.zeros((2, 3), np.float32)}
    buffer = TrajectoryBuffer(2, first, (4,))
    for t in range(2):
        chain = np.full((2, 5, 4), t + 1, np.float32)
        response = PolicyResponse(np.zeros((2, 4), np.float32), np.zeros(2, np.float32), np.zeros(2, np.float32),
                                  np.zeros(0, np.float32), 0, 0, {"stored.chain": chain})
        buffer.record_policy(t, first, response)
    assert buffer.obs["stored.chain"].shape == (2, 2, 5, 4)
    np.testing.assert_array_equal(buffer.obs["stored.chain"][:, 0, 0, 0], [1, 2])
