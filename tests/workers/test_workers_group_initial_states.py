"""GRPO groups inside one env worker: every env of a group starts from its leader's exact initial state (simulator
state and observation), also where the seed does not decide that state, as on the GPU simulator (ManiSkill seeds
torch once, with the first seed of a batch, and tasks draw every env's pose from it)."""

import numpy as np
import pytest
import torch

from embodied_rl.config import load_train_config
from embodied_rl.runners.setup import env_options
from embodied_rl.workers.env_worker import EnvWorker
from sim_envs.maniskill.gpu import GpuManiSkillEnvs
from sim_envs.maniskill.options import ManiSkillOptions
from sim_envs.vector_env import EpisodeTracker

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # the worker's constructor sets torch's threads


class Channel:
    def subscribe(self, key):
        pass


def _flat(state: dict) -> np.ndarray:
    """A ManiSkill state dict as one vector (its tensors in key order)."""
    return np.concatenate([_flat(v) if isinstance(v, dict) else v.numpy().ravel() for _, v in sorted(state.items())])


@pytest.fixture
def unseeded_draws(monkeypatch):
    """PushCube's initial states stop being decided by the seed: every reset also moves the cube by a draw from one
    generator that all envs share and no seed resets (what the GPU simulator's batch-wide torch seed amounts to)."""
    from mani_skill.envs.tasks.tabletop.push_cube import PushCubeEnv
    from mani_skill.utils.structs.pose import Pose

    generator = torch.Generator().manual_seed(0)
    draw_state = PushCubeEnv._initialize_episode

    def initialize(env, env_idx, options):
        draw_state(env, env_idx, options)
        shift = torch.zeros(len(env_idx), 3)
        shift[:, :2] = torch.rand(len(env_idx), 2, generator=generator) * 0.05
        env.obj.set_pose(Pose.create_from_pq(p=env.obj.pose.p + shift, q=env.obj.pose.q))

    monkeypatch.setattr(PushCubeEnv, "_initialize_episode", initialize)


@pytest.mark.parametrize("seed_decides", [True, False], ids=["seeded-states", "unseeded-states"])
def test_envs_of_a_group_in_one_worker_start_from_the_leaders_state(request, seed_decides):
    if not seed_decides:
        request.getfixturevalue("unseeded_draws")
    # One worker, 4 envs, groups of 2: envs (0, 1) and (2, 3); 3-step episodes.
    config = load_train_config("maniskill_pushcube", None, [
        "env.backend=cpu", "env.obs_mode=state", "env.max_episode_steps=3", "rollout.steps_per_iteration=6",
        "algorithm.name=grpo", "algorithm.group_size=2"])
    worker = EnvWorker("maniskill_pushcube", 4, env_options(config), Channel(), seed=0, group_size=2, total_envs=4,
                       group="env", rank=0, world_size=1)
    try:
        env = worker.stages[0]
        firsts = []
        for _ in range(2):  # two grouped episodes
            obs = worker._reset_group_stage(0)  # [4, D]
            states = [_flat(e.get_state()) for e in env.envs]
            for leader, member in ((0, 1), (2, 3)):
                # A copied state is the leader's up to round-off in the robot's root pose (~1e-8 m, not observed).
                np.testing.assert_allclose(states[member], states[leader], rtol=0, atol=0 if seed_decides else 1e-6)
                np.testing.assert_array_equal(obs[member], obs[leader])
            assert not np.allclose(states[0], states[2]) and not np.allclose(obs[0], obs[2])
            firsts.append(obs[0])
            actions = np.random.default_rng(0).uniform(-1, 1, (4, *env.single_action_shape)).astype(np.float32)
            for _ in range(3):
                batch = env.step(actions)
            assert batch.truncated.all()
        assert not np.allclose(firsts[0], firsts[1])  # the next episode starts from a new state
    finally:
        worker.close()


class BatchedManiSkill:
    """ManiSkill's GPU vector env in miniature: one state row ``[3]`` per env; a seeded reset draws every row from
    one generator seeded with the batch's first seed (as ManiSkill seeds torch); ``reset_to_env_states`` writes its
    rows into the envs of ``env_idx`` in their order. Observations are the state times 10."""

    def __init__(self, num_envs: int):
        self.state = torch.zeros(num_envs, 3)
        self.unwrapped, self.device = self, torch.device("cpu")

    def reset(self, seed=None, options=None):
        options = options or {}
        index = options.get("env_idx", torch.arange(len(self.state)))
        if "reset_to_env_states" in options:
            self.state[index] = options["reset_to_env_states"]["env_states"]["actors"]["cube"]
        else:
            self.state[index] = torch.rand(len(index), 3, generator=torch.Generator().manual_seed(seed[0]))
        return self.state * 10, {}

    def get_state_dict(self):
        return {"actors": {"cube": self.state.clone()}}


def test_the_gpu_envs_copy_each_leaders_state_into_the_envs_of_its_id():
    env = GpuManiSkillEnvs.__new__(GpuManiSkillEnvs)  # no GPU here: ManiSkill's batched env stood in
    env.vector_env, env.num_envs, env.options = BatchedManiSkill(6), 6, ManiSkillOptions()
    env.tracker = EpisodeTracker(6)
    obs = env.reset(state_ids=[7, 7, 9, 7, 9, 3])
    drawn = torch.rand(6, 3, generator=torch.Generator().manual_seed(7)).numpy() * 10  # the batch's own draw
    np.testing.assert_array_equal(obs[[0, 2, 5]], drawn[[0, 2, 5]])  # leaders keep theirs
    np.testing.assert_array_equal(obs[[1, 3]], drawn[[0, 0]])
    np.testing.assert_array_equal(obs[4], drawn[2])
    np.testing.assert_array_equal(env.reset(seed=7), drawn)  # seeds 7..12: nothing copied
