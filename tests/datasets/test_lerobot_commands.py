"""The commands: ``embodied-rl demos --format lerobot`` refuses what it must before making anything (exit 2, one
line, the directory untouched); ``embodied-rl export RUN_DIR`` writes a run's evaluation episodes (a tiny random
state policy on PushCube, 6-step episodes) from the evaluation states, deterministic actions, failures kept."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from embodied_rl.cli import main
from embodied_rl.utils.checkpoint import save_checkpoint

STEPS = 6
EVAL_SEED = 5000


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_demos_refuses_a_non_empty_out_before_making_anything(tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code = main(["demos", "--task", "maniskill_pickcube", "--episodes", "1", "--format", "lerobot", "--out", str(out)])
    assert code == 2 and "already exists and is not empty" in _one_error_line(capsys)
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("arguments,expected", [
    (["--format", "lerobot"], "--format lerobot needs --out DIR"),
    (["--format", "zarr", "--out", "x"], "--format='zarr' is not supported; allowed: h5, lerobot"),
    (["--format", "lerobot", "--out", "x", "--image-storage", "gif"], "--image-storage='gif' is not supported"),
])
def test_demos_refuses_bad_format_arguments(arguments, expected, capsys):
    assert main(["demos", "--task", "maniskill_pickcube", "--episodes", "1", *arguments]) == 2
    assert expected in _one_error_line(capsys)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory with one checkpoint of a random state MLP on PushCube."""
    from embodied_rl.models import build_policy
    from embodied_rl.workers.weights import host_weights

    spec = dict(name="mlp", obs_dim=35, action_dim=8, hidden_sizes=[16], init_log_std=-0.5)
    torch.manual_seed(0)
    policy = build_policy(**spec)
    run = tmp_path_factory.mktemp("run")
    config_yaml = (f"task: maniskill_pushcube\nenv:\n  max_episode_steps: {STEPS}\neval:\n  seed: {EVAL_SEED}\n"
                   "  num_episodes: 3\n")
    save_checkpoint(run / "checkpoints", 1, host_weights(policy), b"", {"iteration": 1, "policy_spec": spec},
                    config_yaml, keep_last=1)
    return run, policy


def test_export_writes_the_runs_evaluation_episodes(run_dir, tmp_path, capsys):
    from embodied_rl.datasets.lerobot import read_instructions, read_lerobot_dataset

    run, policy = run_dir
    out = tmp_path / "evaluation"
    assert main(["export", str(run), "--out", str(out), "--episodes", "2", "--obs", "state"]) == 0
    assert f"wrote LeRobot dataset {out}: 2 episodes, {2 * STEPS} frames" in capsys.readouterr().out
    demos = read_lerobot_dataset(out)
    assert demos.episode_seeds.tolist() == [EVAL_SEED, EVAL_SEED + 1]
    assert demos.episode_lengths.tolist() == [STEPS, STEPS] and demos.rgb is None
    assert demos.rewards is not None and demos.success is not None and demos.control_mode == "pd_joint_delta_pos"
    with torch.no_grad():
        expected = policy.act(torch.from_numpy(demos.obs), deterministic=True)[0].numpy()
    np.testing.assert_allclose(demos.actions, np.clip(expected, -1, 1), atol=1e-6)
    assert set(read_instructions(out)) == {"push the blue cube onto the red and white target"}
    assert json.loads((out / "meta/info.json").read_text())["fps"] == 20


def test_export_refuses_a_best_checkpoint_the_run_did_not_keep(run_dir, tmp_path, capsys):
    run, _ = run_dir
    assert main(["export", str(run), "--out", str(tmp_path / "x"), "--checkpoint", "best"]) == 2
    assert "kept no best checkpoint" in _one_error_line(capsys)
    assert not (tmp_path / "x").exists()
