"""Bad input: one line naming the problem, exit code 2, no traceback, nothing written or touched."""

import hashlib

import pytest

from conftest import run_cli


def _assert_one_clean_line(result, *fragments):
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize("args, fragments", [
    (["train", "--task", "nope"], ["unknown task 'nope'", "maniskill_pushcube"]),
    (["train", "--task", "maniskill_pushcube", "stages=[]", "algorithm.lrr=1"], ["algorithm.lrr"]),
    (["train", "--task", "maniskill_pushcube", "stages=[]", "algorithm.lr=fast"], ["algorithm.lr", "fast"]),
    (["train", "--task", "maniskill_pushcube", "stages=[]", "algorithm.gamma=1.5"],
     ["algorithm.gamma=1.5", "allowed"]),
    (["train", "--task", "maniskill_pushcube", "stages=[]", "env.num_workers=-1"], ["env.num_workers=-1", "allowed"]),
    # a key of another algorithm: GRPO's group_size under PPO, PPO's gamma under GRPO; an unknown algorithm
    (["train", "--task", "maniskill_pushcube", "stages=[]", "algorithm.group_size=4"],
     ["algorithm.group_size is not a key of algorithm 'ppo'", "gamma"]),
    (["train", "--task", "maniskill_pushcube", "stages=[]", "algorithm.name=grpo", "algorithm.gamma=0.9"],
     ["algorithm.gamma is not a key of algorithm 'grpo'", "group_size"]),
    (["train", "--task", "maniskill_pushcube", "stages=[]", "algorithm.name=dqn"],
     ["algorithm.name='dqn'", "dapo, dr_grpo, gfpo, grpo, gspo, ppo, reinforce_pp, rloo, rlpd, sac, sft"]),
    (["train", "--task", "maniskill_pushcube", "stages=[]", "algorithm.name=grpo", "algorithm.group_size=3"],
     ["algorithm.group_size=3", "a divisor of the 16 envs"]),
    (["train", "--task", "maniskill_pushcube", "stages=[]", "actor.backend=ddp"],
     ["actor.backend='ddp'", "single, fsdp"]),
    (["train", "--task", "maniskill_pushcube", "stages=[]", "actor.world_size=2"],
     ["actor.world_size=2", "1 for actor.backend=single"]),
    (["train", "--task", "maniskill_pushcube", "stages=[]", "actor.backend=fsdp", "actor.world_size=2",
      "algorithm.name=sac"], ["actor.backend='fsdp' does not train algorithm.name='sac'"]),
    (["train", "--task", "maniskill_pushcube", "stages=[]", "actor.backend=fsdp", "env.obs_mode=rgb",
      "policy.name=openvla_oft", "policy.options.dtype=float16"], ["policy.options.dtype=bfloat16 or float32"]),
    (["train"], ["no task given"]),
    (["frobnicate"], ["invalid choice"]),
    (["train", "--config", "/nonexistent.yaml", "--task", "maniskill_pushcube"], ["file not found"]),
    (["eval", "--checkpoint", "/nonexistent/run"], ["no checkpoint at /nonexistent/run"]),
    (["bench", "env", "--steps", "0"], ["--steps=0"]),
    (["train", "--task", "gym:Pendulum-v1", "env.kwargs.gravity=3"], ["env.kwargs.gravity", "gym:Pendulum-v1"]),
])
def test_bad_input_gets_one_line_and_exit_code_2(args, fragments, tmp_path):
    result = run_cli(*args, cwd=tmp_path)
    _assert_one_clean_line(result, *fragments)
    assert not (tmp_path / "runs").exists()


def test_task_needing_missing_assets_fails_cleanly(tmp_path):
    result = run_cli("train", "--task", "maniskill_picksingleycb", cwd=tmp_path)
    _assert_one_clean_line(result, "needs assets that are not installed")
    assert not (tmp_path / "runs").exists()


def test_missing_vulkan_device_fails_cleanly(tmp_path):
    no_vulkan = {"VK_ICD_FILENAMES": "/nonexistent/icd.json", "VK_DRIVER_FILES": "/nonexistent/icd.json"}
    result = run_cli("train", "--task", "maniskill_pushcube", env=no_vulkan, cwd=tmp_path)
    _assert_one_clean_line(result, "Vulkan", "install_system_deps.sh")
    assert not (tmp_path / "runs").exists()


def _digest(directory):
    return {p.relative_to(directory): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_an_existing_run_directory_is_never_touched_by_a_bad_command(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "iter_000001").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("task: maniskill_pushcube\n")
    (run_dir / "checkpoints" / "iter_000001" / "model.safetensors").write_bytes(b"precious")
    before = _digest(run_dir)
    bad_value = run_cli("train", "--task", "maniskill_pushcube", "--run-dir", str(run_dir), "algorithm.lr=-1")
    _assert_one_clean_line(bad_value, "algorithm.lr=-1.0")
    occupied = run_cli("train", "--task", "maniskill_pushcube", "--run-dir", str(run_dir))
    _assert_one_clean_line(occupied, "already exists", "--resume")
    assert _digest(run_dir) == before
