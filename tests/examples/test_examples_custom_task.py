"""The custom-task example, run as a user runs it: a task registered in the script's ``__main__`` trains in env
workers (separate processes that never ran the script) and evaluates from its checkpoint."""

import json
import sys

import pytest

from tests_helpers import REPO, TrackedProcess

QUICK = ["total_env_steps=100", "env.envs_per_worker=2", "eval.num_episodes=2", "policy.hidden_sizes=[32,32]",
         "algorithm.num_minibatches=2"]


# Left out of the default run (CI time; pytest -m heavy runs it): user-registered tasks in env workers are
# tested in test_commands_user_tasks.
@pytest.mark.heavy
@pytest.mark.slow
def test_custom_task_example_trains_and_evaluates_in_env_workers(tmp_path):
    process = TrackedProcess([sys.executable, str(REPO / "examples" / "custom_task.py"), *QUICK,
                              f"run_dir={tmp_path / 'run'}"], cwd=tmp_path, cli=False)
    returncode, stdout, stderr = process.wait(timeout=300)
    assert returncode == 0, stderr[-3000:]
    assert not process.leftovers(), "processes left running after the example exited"
    result = json.loads(stdout.strip().splitlines()[-1])
    for metrics in (result["final_eval"], result["checkpoint_eval"]):
        assert metrics["eval/episodes"] == 2
        assert 0.0 <= metrics["eval/success_once"] <= 1.0
        # The example's own factory built the env workers' envs: its 25-step time limit, not PushCube's 50.
        assert metrics["eval/episode_length"] == 25
    assert result["checkpoint_eval"]["checkpoint"].startswith(str(tmp_path / "run" / "checkpoints"))
