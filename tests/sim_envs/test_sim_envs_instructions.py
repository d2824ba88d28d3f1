"""A task's language instruction rides in its dict (camera) observations as ``obs["instruction"]``, strings [N]."""

import numpy as np

import sim_envs
from sim_envs.registry import register_task
from sim_envs.vector_env import EpisodeStats, StepBatch


class FakeCameraEnv:
    """Two envs with dict observations (or state arrays); env 1's episode ends at every step."""

    num_envs, single_action_shape, max_episode_steps = 2, (1,), 3

    def __init__(self, dict_obs: bool = True):
        self.dict_obs = dict_obs
        self.closed = False

    def _obs(self, value: float):
        state = np.full((2, 4), value, np.float32)
        return {"rgb": np.zeros((2, 8, 8, 3), np.uint8), "state": state} if self.dict_obs else state

    def reset(self, seed=None, state_ids=None):
        return self._obs(0.0)

    def step(self, actions, observe=True):
        obs, final_obs = self._obs(1.0), self._obs(2.0)
        done = np.array([False, True])
        stats = EpisodeStats(done, np.zeros(2), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool))
        return StepBatch(obs, np.zeros(2, np.float32), np.zeros(2, bool), done, final_obs, np.zeros(2, bool), stats)

    def render(self):
        return np.zeros((2, 4, 4, 3), np.uint8)

    def close(self):
        self.closed = True


@register_task("test_instructions_fake_camera", "fake camera env", instruction="push the blue cube onto the target")
def _fake(num_envs: int, dict_obs: bool = True):
    return FakeCameraEnv(dict_obs)


def test_dict_observations_carry_the_task_instruction_in_reset_step_and_final_obs():
    env = sim_envs.make("test_instructions_fake_camera", 2)
    assert sim_envs.get_task("test_instructions_fake_camera").instruction == "push the blue cube onto the target"
    obs = env.reset()
    assert obs["instruction"].shape == (2,) and obs["instruction"].dtype.kind == "U"
    assert list(obs["instruction"]) == ["push the blue cube onto the target"] * 2
    batch = env.step(np.zeros((2, 1), np.float32))
    for part in (batch.obs, batch.final_obs):
        assert set(part) == {"rgb", "state", "instruction"}
        assert list(part["instruction"]) == ["push the blue cube onto the target"] * 2
    assert batch.final_obs["state"][1, 0] == 2.0 and batch.obs["state"][1, 0] == 1.0  # still kept apart
    # Everything else is the wrapped env's.
    assert env.max_episode_steps == 3 and env.single_action_shape == (1,) and env.render().shape == (2, 4, 4, 3)
    env.close()
    assert env.wrapped.closed


def test_state_observations_stay_plain_arrays_and_make_can_replace_the_instruction():
    env = sim_envs.make("test_instructions_fake_camera", 2, dict_obs=False)
    assert isinstance(env.reset(), np.ndarray) and isinstance(env.step(np.zeros((2, 1))).final_obs, np.ndarray)
    reworded = sim_envs.make("test_instructions_fake_camera", 2, instruction="pull it back")
    assert list(reworded.reset()["instruction"]) == ["pull it back"] * 2


def test_builtin_maniskill_tasks_state_their_instructions():
    for name in ("maniskill_pushcube", "maniskill_pickcube", "maniskill_stackcube"):
        assert sim_envs.get_task(name).instruction
    assert "red cube" in sim_envs.get_task("maniskill_pickcube").instruction
