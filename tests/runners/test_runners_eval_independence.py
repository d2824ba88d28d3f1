"""Evaluation never changes training: evaluations draw their sampling seeds from a stream of their own, so a run
trains the same whatever its evaluation schedule, and a finished run extended with ``--resume`` equals the longer
run bit for bit (CPU, ``deterministic=true``)."""

import numpy as np
import pytest

from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.utils.checkpoint import load_checkpoint

# Sampled (not greedy) evaluation actions, so evaluation requests consume seeds; a constant learning rate, so a
# run of 80 env steps extended to 160 trains at the rates of the 160-step run.
TINY = ["deterministic=true", "env.num_workers=2", "env.envs_per_worker=2", "env.max_episode_steps=15",
        "rollout.steps_per_iteration=10", "eval.num_episodes=4", "eval.greedy=false",
        "checkpoint.every_iterations=1", "checkpoint.keep_last=10", "policy.hidden_sizes=[16]",
        "algorithm.num_minibatches=2", "algorithm.update_epochs=2", "algorithm.anneal_lr=false"]


def final_weights(run_dir) -> dict:
    return load_checkpoint(run_dir / "checkpoints" / "iter_000004").weights


# Left out of the default run (CI time; pytest -m heavy runs it): exact resumes are checked by
# tests/runners/test_runners_stop_checkpoint.py and tests/cli/test_cli_train_flow.py
@pytest.mark.heavy
def test_a_finished_run_extended_by_resume_equals_the_longer_run(cluster, tmp_path):
    whole, extended = tmp_path / "whole", tmp_path / "extended"
    # The whole run evaluates at iterations 3 and 4; the short one at its end (2), which the whole run never does.
    EmbodiedRunner(load_train_config("maniskill_pushcube", None,
                                     TINY + ["total_env_steps=160", "eval.every_iterations=3"]), whole).run()
    EmbodiedRunner(load_train_config("maniskill_pushcube", None,
                                     TINY + ["total_env_steps=80", "eval.every_iterations=3"]), extended).run()
    checkpoint = load_checkpoint(extended)
    assert checkpoint.counters["iteration"] == 2 and checkpoint.env_state is not None
    EmbodiedRunner(load_train_config("maniskill_pushcube", None,
                                     TINY + ["total_env_steps=160", "eval.every_iterations=3"]),
                   extended, checkpoint).run()

    want, have = final_weights(whole), final_weights(extended)
    first = load_checkpoint(whole / "checkpoints" / "iter_000001").weights
    assert any(not np.array_equal(want[k], first[k]) for k in want)  # training moved the weights
    assert want.keys() == have.keys()
    for name in want:
        assert np.array_equal(want[name], have[name]), f"{name} differs: the evaluation at iteration 2 changed training"
