"""eval.stop_at_success ends a run at the first evaluation that reaches it, with a checkpoint of that iteration."""

import json

import pytest

from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.utils.checkpoint import load_checkpoint

TINY = ["env.num_workers=1", "env.envs_per_worker=2", "env.max_episode_steps=10", "rollout.steps_per_iteration=10",
        "total_env_steps=120", "eval.every_iterations=2", "eval.num_episodes=2", "checkpoint.every_iterations=0",
        "policy.hidden_sizes=[16]", "algorithm.num_minibatches=2"]


def test_the_run_stops_at_the_first_evaluation_that_reaches_the_target(cluster, tmp_path):
    # Every evaluation reaches a target of 0: the first one, after iteration 2 of 6, ends the run
    EmbodiedRunner(load_train_config("maniskill_pushcube", None, [*TINY, "eval.stop_at_success=0"]), tmp_path).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/iteration"] for r in rows] == [1, 2] and "eval/success_once" in rows[-1]
    assert load_checkpoint(tmp_path).counters["iteration"] == 2


def test_a_target_out_of_range_is_refused():
    with pytest.raises(ConfigError, match=r"eval.stop_at_success=1.5 .*\[0, 1\]"):
        load_train_config("maniskill_pushcube", None, ["eval.stop_at_success=1.5"])
