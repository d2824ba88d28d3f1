"""SAC through the real runtime (ManiSkill env workers, rollout and actor workers on Ray): the env workers send the
observation after every step, the actor's replay buffer fills and trains, and a checkpoint carries the buffer."""

import json

import numpy as np
import pytest
import torch

from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.utils.checkpoint import list_checkpoints, load_checkpoint, read_trainer_state

OVERRIDES = ["stages=[]", "algorithm.name=sac", "policy.name=mlp_sac", "policy.hidden_sizes=[64,64]",
             "env.num_workers=2", "env.envs_per_worker=4", "rollout.steps_per_iteration=25", "total_env_steps=800",
             "algorithm.learning_starts=300", "algorithm.utd_ratio=0.25", "algorithm.batch_size=64",
             "eval.every_iterations=0", "eval.num_episodes=4", "checkpoint.every_iterations=2", "seed=3"]


@pytest.mark.slow
def test_sac_fills_its_replay_buffer_with_true_next_observations_and_checkpoints_it(cluster, tmp_path):
    config = load_train_config("maniskill_pushcube", None, OVERRIDES)
    EmbodiedRunner(config, tmp_path).run()

    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/replay_size"] for r in rows] == [200, 400, 600, 800]
    assert [r["train/gradient_steps"] for r in rows] == [0, 50, 50, 50]  # from 300 transitions on, 0.25 each
    assert all(np.isfinite(r["train/critic_loss"]) for r in rows[1:])

    checkpoints = list_checkpoints(tmp_path / "checkpoints")
    assert [p.name for p in checkpoints] == ["iter_000002", "iter_000004"]
    state = read_trainer_state(load_checkpoint(checkpoints[0]).trainer_state)
    replay = state["algorithm"]["replay"]
    assert replay["size"] == 400 and replay["transitions"]["obs"].shape == (400, 35)
    obs, next_obs = replay["transitions"]["obs"], replay["transitions"]["next_obs"]
    # Rows are [T=25, B=8] per round, time-major: the next observation of env b at step t is its observation at
    # t + 1, except where an episode ended at t (PushCube ends at success or after 50 steps).
    same = [torch.equal(next_obs[r * 200 + t * 8 + b], obs[r * 200 + (t + 1) * 8 + b])
            for r in range(2) for t in range(24) for b in range(8)]
    assert sum(same) >= len(same) - 16, f"{len(same) - sum(same)} of {len(same)} next observations differ"
    assert not torch.equal(next_obs, obs)

    # Resuming from the last checkpoint continues with its buffer (800 transitions, then 200 more)
    longer = load_train_config("maniskill_pushcube", None, [*OVERRIDES, "total_env_steps=1000"])
    EmbodiedRunner(longer, tmp_path, resume=load_checkpoint(checkpoints[-1])).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] == 1000 and rows[-1]["train/replay_size"] == 1000
    assert rows[-1]["train/gradient_steps"] == 50
