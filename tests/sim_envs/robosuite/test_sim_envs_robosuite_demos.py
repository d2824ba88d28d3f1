"""``embodied-rl demos`` on robosuite tasks: the scripted Lift source is the family's default, its episodes succeed,
end at their first success step and are written in ManiSkill's trajectory format, which the SFT dataset reads."""

from __future__ import annotations

import json

import h5py
import pytest

from embodied_rl.cli import main


def test_scripted_lift_demos_succeed_and_are_written_in_maniskill_format(tmp_path):
    assert main(["demos", "--task", "robosuite_lift", "--episodes", "2", "--out", str(tmp_path)]) == 0
    (directory,) = (tmp_path / "robosuite_lift").iterdir()
    assert directory.name == "scripted-osc_pose-state-2-seed0"
    h5_path = directory / json.loads((directory / "manifest.json").read_text())["trajectory"]
    meta = json.loads(h5_path.with_suffix(".json").read_text())
    assert meta["env_info"]["env_id"] == "Lift" and meta["source_type"] == "scripted"
    assert [e["episode_seed"] for e in meta["episodes"]] == [0, 1]
    with h5py.File(h5_path, "r") as file:
        for episode in meta["episodes"]:
            group = file[f"traj_{episode['episode_id']}"]
            steps = episode["elapsed_steps"]
            assert episode["success"] and 20 < steps < 60  # the script lifts the cube in ~36 steps
            assert group["actions"].shape == (steps, 7) and group["obs"].shape == (steps + 1, 60)
            assert group["success"][-1] and group["terminated"][-1] and not group["success"][:-1].any()
    from embodied_rl.demos import load_demos

    data = load_demos(directory)
    assert data.num_episodes == 2 and data.control_mode == "osc_pose" and data.actions.shape[1] == 7


@pytest.mark.parametrize("args, fragment", [
    (["--task", "robosuite_stack"], "robosuite_stack has no scripted policy; scripted robosuite tasks: Door, Lift"),
    (["--task", "robosuite_lift", "--control-mode", "joint_position"],
     "the scripted robosuite policies act in osc_pose only"),
    (["--task", "robosuite_lift", "--control-mode", "pd_joint_pos"], "control mode 'pd_joint_pos' is not robosuite's"),
    (["--task", "robosuite_door", "--source", "motion_planning"],
     "--source motion_planning is not supported for robosuite_door; allowed: scripted, checkpoint PATH"),
    (["--task", "robosuite_lift", "--planner-speed", "2"], "applies to --source motion_planning only"),
])
def test_bad_requests_are_one_line_and_exit_code_2(args, fragment, tmp_path, capsys):
    assert main(["demos", *args, "--episodes", "2", "--out", str(tmp_path)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0], lines
    assert list(tmp_path.iterdir()) == []
