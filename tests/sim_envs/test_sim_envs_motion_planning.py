"""ManiSkill's motion planner recorded through RecordEpisode, and the replay that converts control modes: the files
are ManiSkill's, so ManiSkill's own replay tool converts them exactly as our replay does."""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

import sim_envs
from sim_envs.maniskill.demos_replay import check_conversion, demo_obs_mode, replay_trajectory_file
from sim_envs.maniskill.motion_planning import planner_env_id, planner_tasks, record_planned_episodes


def test_tasks_with_a_planner_and_a_clear_error_for_the_others():
    assert {"maniskill_pushcube", "maniskill_pickcube", "maniskill_stackcube"} <= set(planner_tasks())
    assert planner_env_id("maniskill_pickcube") == "PickCube-v1"
    with pytest.raises(sim_envs.TaskConfigError) as error:
        planner_env_id("maniskill_picksingleycb")
    message = str(error.value)
    assert "\n" not in message and "maniskill_picksingleycb" in message and "maniskill_pushcube" in message


def test_obs_and_control_mode_checks():
    assert demo_obs_mode(["rgb", "state"]) == "state+rgb" and demo_obs_mode(["state"]) == "state"
    with pytest.raises(sim_envs.TaskConfigError, match="allowed: state, rgb"):
        demo_obs_mode(["depth"])
    check_conversion("pd_joint_pos", "pd_ee_delta_pose")
    with pytest.raises(sim_envs.TaskConfigError, match="allowed: pd_joint_delta_pos, pd_joint_pos"):
        check_conversion("pd_joint_delta_pos", "pd_ee_delta_pose")


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    directory = tmp_path_factory.mktemp("planned")
    seen = []
    attempts = record_planned_episodes("PushCube-v1", 2, directory, seed=10,
                                       on_episode=lambda outcome, kept: seen.append((outcome.seed, kept)))
    assert [a.seed for a in attempts] == [s for s, _ in seen] and sum(k for _, k in seen) == 2
    return directory / "motionplanning.h5"


def test_planned_episodes_are_recorded_in_pd_joint_pos(planned):
    meta = json.loads(planned.with_suffix(".json").read_text())
    assert meta["source_type"] == "motionplanning" and len(meta["episodes"]) == 2
    assert all(e["success"] and e["control_mode"] == "pd_joint_pos" for e in meta["episodes"])
    assert meta["episodes"][0]["episode_seed"] == 10
    with h5py.File(planned, "r") as file:
        assert file["traj_0/actions"].shape[1] == 8 and file["traj_0/obs"].shape[1] == 35


def test_our_conversion_matches_maniskills_replay_tool(planned, tmp_path):
    from mani_skill.trajectory import replay_trajectory

    written = replay_trajectory_file(planned, tmp_path, "ours", "state", "pd_joint_delta_pos")
    assert written == 2
    theirs_dir = tmp_path / "theirs"
    theirs_dir.mkdir()
    for suffix in (".h5", ".json"):
        shutil.copy(planned.with_suffix(suffix), theirs_dir / f"motionplanning{suffix}")
    replay_trajectory.main(replay_trajectory.Args(traj_path=str(theirs_dir / "motionplanning.h5"),
                                                  target_control_mode="pd_joint_delta_pos", save_traj=True))
    theirs = theirs_dir / "motionplanning.state.pd_joint_delta_pos.physx_cpu.h5"
    ours_meta = json.loads((tmp_path / "ours.json").read_text())
    assert [e["success"] for e in ours_meta["episodes"]] == [True, True]
    with h5py.File(tmp_path / "ours.h5", "r") as ours_file, h5py.File(theirs, "r") as theirs_file:
        for trajectory in ("traj_0", "traj_1"):
            np.testing.assert_array_equal(ours_file[trajectory]["actions"][:], theirs_file[trajectory]["actions"][:])
            np.testing.assert_array_equal(ours_file[trajectory]["obs"][:], theirs_file[trajectory]["obs"][:])


def test_a_faster_planner_makes_shorter_episodes_that_still_succeed(tmp_path):
    """PickCube seeds 0-2: ~75 steps at ManiSkill's joint limits (0.9 rad/s), ~50 at 2.0; the solution's own
    planner class is put back afterwards."""
    from mani_skill.examples.motionplanning.panda import solutions
    from mani_skill.examples.motionplanning.panda.motionplanner import PandaArmMotionPlanningSolver

    lengths = {}
    for speed in (0.9, 2.0):
        attempts = record_planned_episodes("PickCube-v1", 3, tmp_path / str(speed), speed=speed, max_attempts=3)
        assert all(a.success for a in attempts)
        lengths[speed] = np.mean([a.steps for a in attempts])
    assert lengths[2.0] < 0.8 * lengths[0.9]
    assert solutions.pick_cube.PandaArmMotionPlanningSolver is PandaArmMotionPlanningSolver
