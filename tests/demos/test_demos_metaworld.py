"""``embodied-rl demos`` on a MetaWorld task: MetaWorld's scripted policy is the family's default source, its
episodes are written in ManiSkill's trajectory format, cached, read by the SFT dataset, and the recorded actions
replayed from the recorded seed solve the task again in ``sim_envs.make``'s env."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

import sim_envs
from embodied_rl.cli import main

EPISODES = 3


def _demos(out: Path, *extra: str) -> int:
    return main(["demos", "--task", "metaworld_reach", "--episodes", str(EPISODES), "--out", str(out), *extra])


@pytest.fixture(scope="module")
def reach_demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos")
    assert _demos(out) == 0
    (directory,) = (out / "metaworld_reach").iterdir()
    manifest = json.loads((directory / "manifest.json").read_text())
    return out, directory, directory / manifest["trajectory"]


def test_scripted_demos_in_maniskill_format(reach_demos, capsys):
    out, directory, h5_path = reach_demos
    assert directory.name == f"scripted-ee_delta_pos-state-{EPISODES}-seed0"
    meta = json.loads(h5_path.with_suffix(".json").read_text())
    assert meta["env_info"]["env_id"] == "reach-v3" and meta["source_type"] == "scripted"
    assert meta["env_info"]["max_episode_steps"] == 500
    assert [e["episode_seed"] for e in meta["episodes"]] == list(range(EPISODES))
    with h5py.File(h5_path, "r") as file:
        for episode in meta["episodes"]:
            group = file[f"traj_{episode['episode_id']}"]
            steps = episode["elapsed_steps"]
            assert episode["success"] and 0 < steps < 500
            assert group["actions"].shape == (steps, 4) and group["obs"].shape == (steps + 1, 39)
            assert group["success"][-1] and group["terminated"][-1] and not group["success"][:-1].any()
    assert _demos(out) == 0 and "cached" in capsys.readouterr().out


def test_the_sft_dataset_reads_them_and_the_actions_replay_to_success(reach_demos):
    from embodied_rl.demos import load_demos

    _, directory, _ = reach_demos
    data = load_demos(directory)
    assert data.num_episodes == EPISODES and data.obs.shape == (data.num_steps, 39)
    assert data.actions.shape == (data.num_steps, 4) and data.control_mode == "ee_delta_pos"
    assert data.success is not None and data.rewards is not None
    env = sim_envs.make("metaworld_reach", 1)
    try:
        for e in range(EPISODES):
            rows = np.flatnonzero(data.episode_index == e)
            obs = env.reset(state_ids=[int(data.episode_seeds[e])])
            np.testing.assert_allclose(obs[0], data.obs[rows[0]], atol=1e-6)  # the recorded start, from the seed
            for row in rows:
                batch = env.step(data.actions[row][None])
            assert batch.terminated[0] and batch.success[0]
    finally:
        env.close()


def test_camera_demos_record_images_and_state(tmp_path):
    assert main(["demos", "--task", "metaworld_drawer_open", "--episodes", "1", "--obs", "rgb", "--out",
                 str(tmp_path)]) == 0
    from embodied_rl.demos import load_demos

    data = load_demos(next((tmp_path / "metaworld_drawer_open").iterdir()))
    assert data.rgb.shape == (data.num_steps, 64, 64, 3) and data.rgb.dtype == np.uint8
    assert data.obs.shape == (data.num_steps, 39)


@pytest.mark.parametrize("args, fragment", [
    (["--task", "metaworld_reach", "--source", "motion_planning"],
     "--source motion_planning is not supported for metaworld_reach; allowed: scripted, checkpoint PATH"),
    (["--task", "metaworld_reach", "--control-mode", "pd_joint_pos"], "control mode 'pd_joint_pos' is not"),
    (["--task", "metaworld_reach", "--planner-speed", "2"], "applies to --source motion_planning only"),
    (["--task", "metaworld_teleport"], "unknown task 'metaworld_teleport'"),
    (["--task", "math_arith"], "has no demonstration sources"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, fragment, tmp_path, capsys):
    assert main(["demos", *args, "--episodes", "2", "--out", str(tmp_path)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0], lines
    assert list(tmp_path.iterdir()) == []
