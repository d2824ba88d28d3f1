"""``embodied-rl demos`` end to end on PushCube (motion planning, a few episodes): ManiSkill's format, readable by
ManiSkill's own dataset class, converted actions that solve the task in our env adapter, a cache hit the second
time, and one-line exit-2 errors for bad input."""

from __future__ import annotations

import json
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from embodied_rl.cli import main

EPISODES = 3


def _demos(out: Path, *extra: str) -> int:
    return main(["demos", "--task", "maniskill_pushcube", "--episodes", str(EPISODES), "--out", str(out), *extra])


@pytest.fixture(scope="module")
def pushcube_demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos")
    assert _demos(out) == 0
    (directory,) = (out / "maniskill_pushcube").iterdir()
    manifest = json.loads((directory / "manifest.json").read_text())
    return out, directory, directory / manifest["trajectory"]


def test_writes_n_successful_episodes_in_maniskill_format(pushcube_demos):
    _, directory, h5_path = pushcube_demos
    assert directory.name == f"motion_planning-pd_joint_delta_pos-state-{EPISODES}-seed0"
    meta = json.loads(h5_path.with_suffix(".json").read_text())
    assert meta["env_info"]["env_id"] == "PushCube-v1"
    assert meta["env_info"]["env_kwargs"]["control_mode"] == "pd_joint_delta_pos"
    assert [e["episode_id"] for e in meta["episodes"]] == list(range(EPISODES))
    assert all(e["success"] and e["control_mode"] == "pd_joint_delta_pos" for e in meta["episodes"])
    with h5py.File(h5_path, "r") as file:
        assert sorted(file) == [f"traj_{i}" for i in range(EPISODES)]
        for episode in meta["episodes"]:
            group = file[f"traj_{episode['episode_id']}"]
            steps = episode["elapsed_steps"]
            assert group["actions"].shape == (steps, 8) and group["obs"].shape == (steps + 1, 35)
            assert group["success"][-1]


def test_maniskill_reads_them_back(pushcube_demos):
    from mani_skill.trajectory.dataset import ManiSkillTrajectoryDataset

    from embodied_rl.demos import load_demos

    _, directory, h5_path = pushcube_demos
    theirs = ManiSkillTrajectoryDataset(str(h5_path))
    ours = load_demos(directory)
    assert len(theirs) == ours.num_steps and ours.num_episodes == EPISODES
    np.testing.assert_array_equal(theirs.obs, ours.obs)
    np.testing.assert_array_equal(theirs.actions, ours.actions)
    assert ours.obs.dtype == np.float32 and ours.actions.shape == (ours.num_steps, 8)
    assert ours.control_mode == "pd_joint_delta_pos" and ours.rgb is None


def test_converted_actions_solve_the_task_in_our_env_adapter(pushcube_demos):
    import sim_envs

    from embodied_rl.demos import load_demos

    demos = load_demos(pushcube_demos[1])
    for episode, seed in enumerate(demos.episode_seeds):
        rows = demos.episode_index == episode
        # PushCube's own 50-step limit is shorter than the planner's pushes (success near step 60).
        env = sim_envs.make("maniskill_pushcube", 1, processes=False, control_mode="pd_joint_delta_pos",
                            seed=int(seed), max_episode_steps=200)
        try:
            obs = env.reset()
            np.testing.assert_array_equal(obs[0], demos.obs[rows][0])  # the demo starts where our env starts
            solved = False
            for action in demos.actions[rows]:
                batch = env.step(action[None])
                solved = bool(batch.success[0])
                if solved or batch.terminated[0] or batch.truncated[0]:
                    break
            assert solved, f"episode {episode} (seed {seed}) did not succeed when replayed"
        finally:
            env.close()


def test_a_second_request_is_a_cache_hit(pushcube_demos, capsys):
    out, directory, h5_path = pushcube_demos
    before = {p.name: p.stat().st_mtime_ns for p in directory.iterdir()}
    capsys.readouterr()
    started = time.perf_counter()
    assert _demos(out) == 0
    elapsed = time.perf_counter() - started
    assert "cached" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in directory.iterdir()} == before
    assert elapsed < 5.0, elapsed
    assert [p.name for p in (out / "maniskill_pushcube").iterdir()] == [directory.name]  # no staging left


@pytest.mark.parametrize("args, fragment", [
    (["--task", "maniskill_pushcube", "--episodes", "0"], "--episodes=0"),
    (["--task", "maniskill_picksingleycb", "--episodes", "2"], "no motion-planning solution; tasks with one:"),
    (["--task", "nope", "--episodes", "2"], "unknown task 'nope'"),
    (["--task", "maniskill_pushcube", "--episodes", "2", "--obs", "depth"], "--obs='depth'"),
    (["--task", "maniskill_pushcube", "--episodes", "2", "--source", "teleop"], "--source teleop"),
    (["--task", "maniskill_pushcube", "--episodes", "2", "--control-mode", "pd_base_vel"], "pd_base_vel"),
    (["--task", "maniskill_pushcube", "--episodes", "2", "--source", "checkpoint", "/nonexistent"],
     "no checkpoint at /nonexistent"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, fragment, tmp_path, capsys):
    assert main(["demos", *args, "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], captured.err
    assert list(tmp_path.iterdir()) == []
