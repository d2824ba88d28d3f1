"""Camera images and language instructions travel: trajectory buffer, channel encoding, rollout and actor inputs."""

import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from embodied_rl.runtime.transports import shared_memory
from embodied_rl.runtime.transports.encoding import Decoder, Encoder
from embodied_rl.workers.actor_worker import ActorWorker
from embodied_rl.workers.messages import PolicyResponse
from embodied_rl.workers.policy_server import _policy_input
from embodied_rl.workers.trajectory_buffer import TrajectoryBuffer, merge_stages
from sim_envs.instructions import with_instruction


def _obs(b: int, instruction: str, value: int = 0) -> dict:
    obs = {"rgb": np.full((b, 4, 4, 3), value, np.uint8), "state": np.full((b, 2), value, np.float32)}
    return with_instruction(obs, instruction)


def _trajectory(instructions: list[str], b: int = 2, env_rank: int = 0):
    buffer = TrajectoryBuffer(len(instructions), _obs(b, instructions[0]), (3,))
    for t, text in enumerate(instructions):
        response = PolicyResponse(np.zeros((b, 3), np.float32), np.zeros(b, np.float32), np.zeros(b, np.float32),
                                  np.zeros(0, np.float32), 0, 0)
        buffer.record_policy(t, _obs(b, text, value=t), response)
    return buffer.to_trajectory(env_rank)


def test_trajectory_buffer_keeps_instruction_strings_and_widens_for_longer_ones():
    trajectory = _trajectory(["go", "push the blue cube onto the red and white target", "go"])
    assert trajectory.obs["instruction"].shape == (3, 2) and trajectory.obs["instruction"].dtype.kind == "U"
    assert trajectory.obs["instruction"][1, 0] == "push the blue cube onto the red and white target"  # not cut
    assert list(trajectory.obs["instruction"][:, 1]) == ["go", "push the blue cube onto the red and white target",
                                                         "go"]
    assert trajectory.obs["rgb"].shape == (3, 2, 4, 4, 3) and trajectory.obs["rgb"][2].max() == 2
    merged = merge_stages([trajectory, _trajectory(["a", "b", "c"], b=1)], env_rank=0)
    assert merged.obs["instruction"].shape == (3, 3) and merged.obs["instruction"][2, 2] == "c"


@pytest.fixture
def ends(tmp_path):
    tag = f"erl-test-{os.getpid()}-{tmp_path.name}"
    encoder = Encoder(shared_memory.segment_prefix(tag))
    yield encoder
    encoder.close()
    shared_memory.sweep_segments(tag)


def test_a_trajectory_with_images_and_instructions_crosses_the_channel_encoding_through_shared_memory(ends):
    trajectory = _trajectory(["push the blue cube onto the red and white target"] * 4, b=8)
    payload, descriptors = ends.encode(trajectory, "actor", 256, True)  # arrays >= 256 bytes by shared memory
    # The rgb and the instruction arrays (4 x 8 x 48 x 4 bytes) travel out of band, not inside the pickle.
    assert sum(d[0] == "pooled" for d in descriptors) >= 2 and len(payload) < 4000
    received = Decoder().decode(payload, descriptors)
    for key in ("rgb", "state", "instruction"):
        np.testing.assert_array_equal(received.obs[key], trajectory.obs[key])
    assert received.obs["instruction"].dtype == trajectory.obs["instruction"].dtype


def test_rollout_and_actor_inputs_are_tensors_for_numbers_and_numpy_for_strings():
    obs = _obs(3, "stack the red cube on the green cube", value=7)
    rollout = {k: _policy_input(v, torch.device("cpu")) for k, v in obs.items()}
    actor = SimpleNamespace(device=torch.device("cpu"))
    actor._tensor = lambda value: ActorWorker._tensor(actor, value)
    read_only = dict(obs, rgb=obs["rgb"].copy())
    read_only["rgb"].flags.writeable = False  # as arrays received from shared memory may be
    trained = actor._tensor(read_only)
    for converted in (rollout, trained):
        assert converted["rgb"].dtype == torch.uint8 and converted["state"].dtype == torch.float32
        assert isinstance(converted["instruction"], np.ndarray)
        assert list(converted["instruction"]) == ["stack the red cube on the green cube"] * 3
    # The actor's minibatch loop indexes every observation part with the same index tensor.
    index = torch.tensor([2, 0])
    assert list(trained["instruction"][index]) == ["stack the red cube on the green cube"] * 2
