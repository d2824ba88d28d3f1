"""A staged recipe through the real CLI: motion-planning demos -> SFT -> GRPO, each stage from the last one."""

import json

import pytest
import yaml

from tests_helpers import TrackedProcess

STAGED = {"stages": [
    {"name": "sft", "algorithm": {"name": "sft", "demo_episodes": 3, "gradient_steps": 300,
                                  "steps_per_iteration": 100, "batch_size": 64, "lr": 1e-3}},
    {"name": "grpo", "algorithm": {"name": "grpo", "group_size": 2, "score": "return", "num_minibatches": 2,
                                   "update_epochs": 1, "kl_coef": 0.1},
     "env": {"max_episode_steps": 10}, "rollout": {"steps_per_iteration": 10}, "total_env_steps": 40},
]}
TINY = ["env.num_workers=1", "env.envs_per_worker=2", "eval.num_episodes=2", "eval.every_iterations=0",
        "policy.hidden_sizes=[32,32]"]


@pytest.mark.slow
def test_demos_then_sft_then_grpo_then_resume_skips_finished_stages(tmp_path):
    recipe = tmp_path / "staged.yaml"
    recipe.write_text(yaml.safe_dump(STAGED))
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    args = ["train", "--task", "maniskill_pushcube", "--config", str(recipe), "--run-dir", str(run_dir), *TINY]
    returncode, stdout, stderr = TrackedProcess(args, env={"XDG_CACHE_HOME": str(cache)}).wait()
    assert returncode == 0, stderr[-3000:]
    assert "demonstrations:" in stderr and "generated, 3 episodes" in stderr
    assert list((cache / "embodied-rl" / "demos" / "maniskill_pushcube").iterdir())  # cached for the next run

    summary = json.loads(stdout.strip().splitlines()[-1])
    assert list(summary["stages"]) == ["0-sft", "1-grpo"]
    assert summary["stages"]["1-grpo"]["env_steps"] == 40
    sft_rows = [json.loads(line) for line in (run_dir / "0-sft" / "metrics.jsonl").read_text().splitlines()]
    losses = [row["train/sft_loss"] for row in sft_rows]
    assert len(losses) == 3 and losses[-1] < losses[0] / 2, losses  # cloning the demonstrations works
    assert f"stage 1-grpo: grpo from {run_dir / '0-sft' / 'best_checkpoint' / 'iter_000003'}" in stdout
    grpo_rows = [json.loads(line) for line in (run_dir / "1-grpo" / "metrics.jsonl").read_text().splitlines()]
    assert all(row["train/groups_trained"] >= 1 for row in grpo_rows)
    assert all(row["train/kl_to_reference"] >= 0 for row in grpo_rows)  # against the frozen SFT policy

    returncode, stdout, stderr = TrackedProcess(["train", "--run-dir", str(run_dir), "--resume"],
                                                env={"XDG_CACHE_HOME": str(cache)}).wait()
    assert returncode == 0, stderr[-3000:]
    assert "stage 0-sft: finished earlier" in stdout and "stage 1-grpo: finished earlier" in stdout
