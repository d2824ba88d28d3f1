"""``embodied-rl demos --source checkpoint PATH``: a trained (here: random) state policy's deterministic actions,
recorded in its control mode, and re-rendered with cameras by replay (camera demos from a state expert)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embodied_rl.cli import main
from embodied_rl.utils.checkpoint import save_checkpoint

STEPS = 6  # the checkpoint's env.max_episode_steps: short episodes keep the test fast


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from embodied_rl.models import build_policy
    from embodied_rl.workers.weights import host_weights

    spec = dict(name="mlp", obs_dim=35, action_dim=8, hidden_sizes=[16], init_log_std=-0.5)
    torch.manual_seed(0)
    policy = build_policy(**spec)
    config_yaml = f"task: maniskill_pushcube\nenv:\n  max_episode_steps: {STEPS}\n"
    path = save_checkpoint(tmp_path_factory.mktemp("run") / "checkpoints", 1, host_weights(policy), b"",
                           {"iteration": 1, "policy_spec": spec}, config_yaml, keep_last=1)
    return path, policy


def _demos(out, checkpoint_path, *extra):
    return main(["demos", "--task", "maniskill_pushcube", "--source", "checkpoint", str(checkpoint_path),
                 "--keep-failures", "--out", str(out), *extra])


def test_records_the_policy_deterministic_actions_in_its_control_mode(checkpoint, tmp_path):
    from embodied_rl.demos import load_demos

    path, policy = checkpoint
    assert _demos(tmp_path, path, "--episodes", "2") == 0
    (directory,) = (tmp_path / "maniskill_pushcube").iterdir()
    assert directory.name.startswith("checkpoint_") and directory.name.endswith(
        "-pd_joint_delta_pos-state-2-seed0-with-failures")
    demos = load_demos(directory)
    assert demos.num_episodes == 2 and list(demos.episode_lengths) == [STEPS, STEPS]
    assert demos.control_mode == "pd_joint_delta_pos" and list(demos.episode_seeds) == [0, 1]
    with torch.no_grad():
        expected = policy.act(torch.from_numpy(demos.obs), deterministic=True)[0].numpy()
    np.testing.assert_allclose(demos.actions, np.clip(expected, -1, 1), atol=1e-6)


def test_camera_demos_from_a_state_expert(checkpoint, tmp_path):
    from embodied_rl.demos import load_demos

    path, policy = checkpoint
    assert _demos(tmp_path, path, "--episodes", "1", "--obs", "rgb") == 0
    (directory,) = (tmp_path / "maniskill_pushcube").iterdir()
    demos = load_demos(directory)
    assert demos.rgb is not None and demos.rgb.shape == (STEPS, 64, 64, 3) and demos.rgb.dtype == np.uint8
    assert demos.obs.shape == (STEPS, 25)  # the proprioceptive state our rgb env gives beside the image
    assert demos.rgb.std() > 0
    state = load_demos(directory / "checkpoint.h5")  # the state-only recording the replay started from
    np.testing.assert_array_equal(demos.actions, state.actions)

    # SFT reads them with the instruction the env workers give the policy on this task (language policies
    # must be trained on the prompt they will see).
    import sim_envs
    from embodied_rl.config.loader import load_train_config
    from embodied_rl.runners.demonstrations import load_sft_demonstrations

    config = load_train_config("maniskill_pushcube", overrides=[
        "env.obs_mode=rgb", "policy.name=cnn", "algorithm.name=sft", "algorithm.demo_source=path", f"algorithm.demo_path={directory}"])
    rows = load_sft_demonstrations(config)["obs"]
    env = sim_envs.make("maniskill_pushcube", num_envs=1, obs_mode="rgb")
    try:
        expected = env.reset(seed=0)["instruction"][0]
    finally:
        env.close()
    assert expected and rows["instruction"].shape == (STEPS,) and set(rows["instruction"]) == {expected}
    np.testing.assert_array_equal(rows["rgb"], demos.rgb)


def test_a_policy_that_never_succeeds_gives_up_with_exit_code_1(checkpoint, tmp_path, capsys):
    path, _ = checkpoint
    code = main(["demos", "--task", "maniskill_pushcube", "--source", "checkpoint", str(path), "--episodes", "1",
                 "--out", str(tmp_path)])
    assert code == 1
    assert "only 0 of 1 demos after 13 checkpoint episodes" in capsys.readouterr().err
    assert list((tmp_path / "maniskill_pushcube").iterdir()) == []  # the staging directory is gone too


def test_a_checkpoint_of_another_task_is_refused(checkpoint, tmp_path, capsys):
    path, _ = checkpoint
    code = main(["demos", "--task", "maniskill_pickcube", "--source", "checkpoint", str(path), "--episodes", "1",
                 "--out", str(tmp_path)])
    assert code == 2
    assert "was trained on task 'maniskill_pushcube'" in capsys.readouterr().err


def test_a_chunking_policy_runs_each_chunk_open_loop(tmp_path):
    from embodied_rl.demos import load_demos
    from embodied_rl.models import build_policy
    from embodied_rl.workers.weights import host_weights

    spec = dict(name="mlp", obs_dim=35, action_dim=8, hidden_sizes=[16], init_log_std=-0.5, action_chunk=3)
    torch.manual_seed(1)
    policy = build_policy(**spec)
    config_yaml = f"task: maniskill_pushcube\nenv:\n  max_episode_steps: {STEPS}\n"
    path = save_checkpoint(tmp_path / "run" / "checkpoints", 1, host_weights(policy), b"",
                           {"iteration": 1, "policy_spec": spec}, config_yaml, keep_last=1)
    assert _demos(tmp_path / "demos", path, "--episodes", "1") == 0
    demos = load_demos(next((tmp_path / "demos" / "maniskill_pushcube").iterdir()))
    assert demos.num_steps == STEPS
    with torch.no_grad():
        chunks = policy.act(torch.from_numpy(demos.obs[::3]), deterministic=True)[0].numpy()  # [STEPS / 3, 3, 8]
    np.testing.assert_allclose(demos.actions, np.clip(chunks.reshape(STEPS, 8), -1, 1), atol=1e-6)
