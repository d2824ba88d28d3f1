"""A run resumed from an older checkpoint than its last logged iteration logs each iteration once."""

import json
import shutil

from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.utils.checkpoint import load_checkpoint

TINY = ["env.num_workers=1", "env.envs_per_worker=2", "env.max_episode_steps=10", "rollout.steps_per_iteration=10",
        "total_env_steps=80", "eval.every_iterations=0", "eval.num_episodes=2", "checkpoint.every_iterations=2",
        "checkpoint.keep_last=5", "policy.hidden_sizes=[16]", "algorithm.num_minibatches=2"]


def iterations(run_dir) -> list[int]:
    return [json.loads(line)["train/iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_rows_logged_after_the_resumed_checkpoint_are_replaced_not_repeated(cluster, tmp_path):
    config = load_train_config("maniskill_pushcube", None, TINY)
    EmbodiedRunner(config, tmp_path).run()
    assert iterations(tmp_path) == [1, 2, 3, 4]
    shutil.rmtree(tmp_path / "checkpoints" / "iter_000004")  # as if the run died before its last checkpoint
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint.counters["iteration"] == 2
    EmbodiedRunner(load_train_config("maniskill_pushcube", None, TINY), tmp_path, checkpoint).run()
    assert iterations(tmp_path) == [1, 2, 3, 4]
    steps = [json.loads(line)["env_steps"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [20, 40, 60, 80]
