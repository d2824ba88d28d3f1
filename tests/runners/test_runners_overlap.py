"""rollout.max_staleness=1: the next round is sampled while the actor updates, on data one policy version old."""

import json

import pytest

from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner

TINY = ["env.num_workers=1", "env.envs_per_worker=2", "env.max_episode_steps=20", "rollout.steps_per_iteration=20",
        "total_env_steps=160", "eval.every_iterations=0", "eval.num_episodes=2", "checkpoint.every_iterations=0",
        "policy.hidden_sizes=[64,64]", "algorithm.num_minibatches=2", "algorithm.update_epochs=4"]
APART = "placement.components={'env,rollout': '0', 'actor': '1'}"


def test_sampling_overlaps_the_update_with_staleness_one(cluster, tmp_path):
    config = load_train_config("maniskill_pushcube", None, [*TINY, APART, "rollout.max_staleness=1"])
    EmbodiedRunner(config, tmp_path).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/iteration"] for r in rows] == [1, 2, 3, 4] and rows[-1]["env_steps"] == 160
    assert [r["train/policy_staleness"] for r in rows] == [0, 1, 1, 1]
    for row in rows[:-1]:  # the last iteration has no next round to sample
        overlap = (min(row["time/update_ended_at"], row["time/sample_ended_at"])
                   - max(row["time/update_started_at"], row["time/sample_started_at"]))
        assert overlap > 0, row
    assert "time/sample_started_at" not in rows[-1]


def test_overlap_needs_sampling_and_training_on_their_own_slots():
    with pytest.raises(ConfigError, match="rollout.max_staleness=1 needs sampling and training on their own slots"):
        load_train_config("maniskill_pushcube", None, [*TINY, "placement.components={'env,rollout,actor': '0-1'}",
                                                       "rollout.max_staleness=1"])
