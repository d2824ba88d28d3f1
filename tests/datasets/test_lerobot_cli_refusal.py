"""Through the real CLI: ``embodied-rl train ... algorithm.demos=DIR`` with a LeRobot dataset that does not fit the
task exits 2 with one line naming the feature, before anything starts or is written (the preflight check builds
one env of the task and compares the dataset's ``meta/info.json`` with it)."""

from __future__ import annotations

from conftest import run_cli
from synthetic_demos import tiny_demos

from embodied_rl.datasets.lerobot import write_lerobot_dataset


def test_train_refuses_a_dataset_of_another_state_space(tmp_path):
    dataset = tmp_path / "lerobot"
    write_lerobot_dataset(tiny_demos(state_dim=5, action_dim=8, cameras=0), dataset, 20, "push the cube")
    done = run_cli("train", "--task", "maniskill_pushcube", "--run-dir", str(tmp_path / "run"), "stages=[]",
                   "algorithm.name=sft", f"algorithm.demos={dataset}", "algorithm.gradient_steps=1", timeout=400)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [f"error: algorithm.demos={dataset}: feature 'observation.state' is [5] in the dataset; task "
                     "'maniskill_pushcube' takes [35]"], done.stderr[-2000:]
    assert not (tmp_path / "run").exists()
