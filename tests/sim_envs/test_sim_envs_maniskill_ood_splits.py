"""Out-of-distribution splits change what they say they change, and nothing else, on the same fixed states
(real ManiSkill CPU envs; each split against an in-distribution twin reset from the same seed)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import sim_envs
from sim_envs.errors import TaskConfigError
from sim_envs.maniskill.ood_splits import OFFSET_RANGE_M, PUSH_STEPS

SEED = 7
# PickCube-v1's state vector: arm joints 0-6, gripper 7-8, joint velocities 9-17, is_grasped 18, tcp pose 19-25,
# goal 26-28, cube pose 29-35 (position 29-31), tcp->cube 36-38, cube->goal 39-41.
ARM, GRIPPER, VELOCITIES, GOAL, CUBE_XY, CUBE_Z = (slice(0, 7), slice(7, 9), slice(9, 18), slice(26, 29),
                                                   slice(29, 31), 31)


def _pickcube(split=None, **options):
    return sim_envs.make("maniskill_pickcube", 1, processes=False, control_mode="pd_ee_delta_pos",
                         ood_split=split, **options)


@contextlib.contextmanager
def _twins(split: str, **options):
    """An in-distribution PickCube env and one on ``split``, closed afterwards."""
    plain, varied = _pickcube(**options), _pickcube(split, **options)
    try:
        yield plain, varied
    finally:
        plain.close()
        varied.close()


def test_execution_moves_the_cube_and_arm_at_reset_and_pushes_the_cube_mid_episode():
    with _twins("execution") as (plain, perturbed):
        a, b = plain.reset(state_ids=[SEED])[0], perturbed.reset(state_ids=[SEED])[0]
        variation = perturbed.envs[0].ood_split.variation
        np.testing.assert_array_equal(a[GOAL], b[GOAL])  # the task's goal is the same
        np.testing.assert_array_equal(a[GRIPPER], b[GRIPPER])
        assert np.abs(b[VELOCITIES]).max() == 0
        offset = np.linalg.norm(b[CUBE_XY] - a[CUBE_XY])
        assert OFFSET_RANGE_M[0] - 1e-4 <= offset <= OFFSET_RANGE_M[1] + 1e-4, offset
        assert a[CUBE_Z] == pytest.approx(b[CUBE_Z], abs=1e-6)
        np.testing.assert_allclose(b[ARM] - a[ARM], variation["joint_offsets"], atol=1e-5)
        assert PUSH_STEPS[0] <= variation["push_step"] <= PUSH_STEPS[1]
        # from the perturbed state, the twin without the split follows the same steps until the push
        twin = plain.envs[0]
        twin.reset(seed=SEED, state=perturbed.envs[0].get_state())
        still = np.zeros((1, 4), np.float32)
        for step in range(variation["push_step"] + 3):
            x, y = plain.step(still).obs[0], perturbed.step(still).obs[0]
            if step < variation["push_step"]:
                np.testing.assert_allclose(x, y, atol=1e-6)
        moved = np.linalg.norm(y[CUBE_XY] - x[CUBE_XY])
        assert moved > 0.005, moved  # the push moved the cube; nothing moved the twin's
        # the same state id gives the same variation in another env
        again = _pickcube("execution")
        try:
            np.testing.assert_array_equal(again.reset(state_ids=[SEED])[0], b)
        finally:
            again.close()


def test_semantic_resizes_the_object_and_holds_out_the_instruction():
    with _twins("semantic") as (plain, unseen):
        a, b = plain.reset(state_ids=[SEED])[0], unseen.reset(state_ids=[SEED])[0]
        scale = unseen.envs[0].ood_split.variation["object_scale"]
        np.testing.assert_allclose(b[CUBE_XY], a[CUBE_XY], atol=1e-6)  # the same place on the table
        np.testing.assert_allclose(b[GOAL][:2], a[GOAL][:2], atol=1e-6)
        assert b[CUBE_Z] == pytest.approx(0.02 * scale, abs=1e-5) and a[CUBE_Z] == pytest.approx(0.02, abs=1e-5)
        np.testing.assert_array_equal(a[ARM], b[ARM])
        assert unseen.instruction != plain.instruction and "red cube" in plain.instruction
        scales = set()
        for state in range(SEED, SEED + 6):  # drawn per state: both sizes appear
            unseen.reset(state_ids=[state])
            scales.add(unseen.envs[0].ood_split.variation["object_scale"])
        assert scales == {0.75, 1.25}


@pytest.mark.slow
def test_vision_changes_the_images_and_not_the_physics():
    options = dict(obs_mode="rgb", image_size=32)
    with _twins("vision", **options) as (plain, seen):
        a, b = plain.reset(state_ids=[SEED]), seen.reset(state_ids=[SEED])
        np.testing.assert_array_equal(a["state"], b["state"])
        assert np.abs(a["rgb"].astype(int) - b["rgb"].astype(int)).mean() > 5
        actions = np.random.default_rng(0).uniform(-1, 1, (5, 1, 4)).astype(np.float32)
        for action in actions:
            x, y = plain.step(action).obs, seen.step(action).obs
            np.testing.assert_array_equal(x["state"], y["state"])
        assert not np.array_equal(x["rgb"], y["rgb"])
        assert set(seen.envs[0].ood_split.variation) == {"ambient_light", "colours", "camera_shift"}


def test_vision_on_state_observations_leaves_the_episode_as_it_is():
    with _twins("vision") as (plain, unseen):
        np.testing.assert_array_equal(plain.reset(state_ids=[SEED]), unseen.reset(state_ids=[SEED]))
        action = np.full((1, 4), 0.5, np.float32)
        np.testing.assert_array_equal(plain.step(action).obs, unseen.step(action).obs)
        assert unseen.envs[0].ood_split.variation == {"rendered": False}


def test_unknown_splits_and_tasks_without_splits_are_refused_in_one_line():
    with pytest.raises(TaskConfigError, match="ood_split='lighting' is not a split; allowed: vision, semantic, "
                                              "execution"):
        _pickcube("lighting")
    from sim_envs.maniskill.tasks import make_maniskill

    with pytest.raises(TaskConfigError, match="PushT-v1 has no OOD splits"):
        make_maniskill("PushT-v1", 1, ood_split="vision")
