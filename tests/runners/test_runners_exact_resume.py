"""Exact resume on CPU: a run resumed from its iteration-2 checkpoint reproduces the uninterrupted run's losses,
evaluations and weights bit for bit (``deterministic=true``: seeded per-request sampling; env states saved)."""

import json
import shutil

import numpy as np
import pytest

from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.utils.checkpoint import load_checkpoint

# Episodes of 15 steps in iterations of 10: every checkpoint falls in the middle of episodes, and episodes end
# (and reset) inside iterations.
TINY = ["deterministic=true", "env.num_workers=2", "env.envs_per_worker=2", "env.max_episode_steps=15",
        "rollout.steps_per_iteration=10", "total_env_steps=160", "eval.every_iterations=2", "eval.num_episodes=4",
        "checkpoint.every_iterations=1", "checkpoint.keep_last=10", "policy.hidden_sizes=[16]",
        "algorithm.num_minibatches=2", "algorithm.update_epochs=2"]


def learning_rows(run_dir) -> list[dict]:
    """Each logged iteration's training and evaluation figures (timings left out: they are wall clock)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k.split("/")[0] in ("train", "eval")} for row in rows]


# Left out of the default run (CI time; pytest -m heavy runs it): bit-exact resume is tested in the default run
# by test_runners_stop_checkpoint and test_runners_eval_independence.
@pytest.mark.heavy
def test_a_resumed_run_continues_bit_for_bit(cluster, tmp_path):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    EmbodiedRunner(load_train_config("maniskill_pushcube", None, TINY), whole).run()
    shutil.copytree(whole, resumed)
    for later in ("iter_000003", "iter_000004"):  # as if the run had stopped after its second iteration
        shutil.rmtree(resumed / "checkpoints" / later)
    checkpoint = load_checkpoint(resumed)
    assert checkpoint.counters["iteration"] == 2 and checkpoint.env_state is not None
    EmbodiedRunner(load_train_config("maniskill_pushcube", None, TINY), resumed, checkpoint).run()

    expected, got = learning_rows(whole), learning_rows(resumed)
    assert [r["train/iteration"] for r in got] == [1, 2, 3, 4]
    assert expected[2]["train/policy_loss"] != expected[3]["train/policy_loss"]  # figures that move
    for iteration, (want, have) in enumerate(zip(expected, got), 1):
        assert have == want, f"iteration {iteration} differs after resuming at 2"
    final_whole = load_checkpoint(whole / "checkpoints" / "iter_000004").weights
    final_resumed = load_checkpoint(resumed / "checkpoints" / "iter_000004").weights
    assert final_whole.keys() == final_resumed.keys()
    for name in final_whole:
        assert np.array_equal(final_whole[name], final_resumed[name]), name
