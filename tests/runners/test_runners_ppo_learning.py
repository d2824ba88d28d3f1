"""A short real PushCube training run through the runtime (env, rollout and actor workers on Ray)."""

import json

import numpy as np
import pytest

from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.utils.checkpoint import list_checkpoints


@pytest.mark.slow
def test_short_pushcube_run_improves_episode_return(cluster, tmp_path):
    config = load_train_config("maniskill_pushcube", None, [
        "env.num_workers=4", "env.envs_per_worker=2", "rollout.steps_per_iteration=50",
        "total_env_steps=8000", "eval.every_iterations=10", "eval.num_episodes=8",
        "checkpoint.every_iterations=10", "seed=1"])
    runner = EmbodiedRunner(config, tmp_path)
    final_eval = runner.run()

    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 20 and rows[-1]["env_steps"] == 8000
    returns = [r["train/episode_return"] for r in rows if "train/episode_return" in r]
    first, last = np.mean(returns[:4]), np.mean(returns[-4:])
    assert last > first * 1.15, f"episode return did not improve: first {returns[:4]}, last {returns[-4:]}"
    policy_losses = {round(r["train/policy_loss"], 6) for r in rows}
    assert len(policy_losses) > 10  # the loss moves with the data, it is not a constant
    # Every trajectory was produced by the policy version that the actor had just published.
    assert all(r["train/policy_staleness"] == 0 for r in rows)
    assert 0.0 <= final_eval["eval/success_once"] <= 1.0 and final_eval["eval/episodes"] == 8
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["iter_000010", "iter_000020"]
    assert any((tmp_path / "tensorboard").iterdir())
