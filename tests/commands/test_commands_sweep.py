"""``embodied-rl sweep`` end to end: real training trials under Ray Tune, then the report of their runs."""

import json

import pytest
import yaml

from conftest import run_cli
from tests_helpers import TrackedProcess

TINY = ["stages=[]", "env.num_workers=1", "env.envs_per_worker=2", "rollout.steps_per_iteration=20",
        "algorithm.num_minibatches=2", "eval.num_episodes=2", "eval.every_iterations=1",
        "checkpoint.every_iterations=0", "policy.hidden_sizes=[32,32]", "total_env_steps=80",
        "env.max_episode_steps=20", "placement.slots=1"]


def test_a_bad_swept_value_is_one_line_before_any_trial(tmp_path):
    result = run_cli("sweep", "--task", "maniskill_pushcube", "--grid", "algorithm.nonsense=[1,2]",
                     "--out", str(tmp_path / "out"), *TINY)
    assert result.returncode == 2 and "algorithm.nonsense" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


# Left out of the default run (CI time; pytest -m heavy runs it): a trial's training and its reported metrics are
# in tests/sweep/test_sweep_trial.py, the search space in test_sweep_space.py
@pytest.mark.heavy
def test_two_settings_train_as_tune_trials_and_are_reported(tmp_path):
    out = tmp_path / "sweep"
    result = run_cli("sweep", "--task", "maniskill_pushcube", "--grid", "algorithm.lr=[1e-3,3e-4]", "--seeds", "1",
                     "--out", str(out), *TINY, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    trials = json.loads((out / "trials.json").read_text())["trials"]
    assert sorted(t["trial"] for t in trials) == ["trial000-lr=0.001-seed=0", "trial001-lr=0.0003-seed=0"]
    for trial in trials:
        assert trial["status"] == "done" and trial["env_steps"] == 80
        rows = [json.loads(line) for line in (out / "runs" / trial["trial"] / "metrics.jsonl").read_text().splitlines()]
        assert trial["success"] == [r for r in rows if "eval/success_once" in r][-1]["eval/success_once"]
        config = yaml.safe_load((out / "runs" / trial["trial"] / "config.yaml").read_text())
        assert config["algorithm"]["lr"] == float(trial["overrides"]["algorithm.lr"])
    report = json.loads((out / "report" / "report.json").read_text())
    assert [s["setting"] for s in report["settings"]] == ["lr=0.001", "lr=0.0003"]
    assert (out / "report" / "report.html").is_file()


@pytest.mark.slow
@pytest.mark.heavy  # ~80 s: two staged MetaWorld runs one after another
def test_asha_stops_the_hopeless_trial_which_leaves_a_stop_checkpoint(tmp_path):
    out = tmp_path / "sweep"
    process = TrackedProcess(["sweep", "--task", "metaworld_reach", "--out", str(out),
                              "--grid", "stages.0.algorithm.gradient_steps=[600,5]", "--early-stop", "asha",
                              "--grace-env-steps", "1600", "--max-concurrent", "1", "placement.slots=2",
                              "stages.0.algorithm.demo_episodes=30", "stages.1.total_env_steps=9600",
                              "stages.1.eval.every_iterations=1", "eval.num_episodes=16", "eval.max_episode_steps=150"])
    returncode, stdout, stderr = process.wait(timeout=900)
    assert returncode == 0, stdout[-2000:] + stderr[-2000:]
    assert not process.leftovers(), "processes left running after the sweep"
    trials = {t["trial"]: t for t in json.loads((out / "trials.json").read_text())["trials"]}
    kept, stopped = trials["trial000-gradient_steps=600-seed=0"], trials["trial001-gradient_steps=5-seed=0"]
    assert kept["status"] == "done" and kept["env_steps"] == 9600
    assert stopped["status"] == "stopped early" and stopped["env_steps"] < 9600
    checkpoints = out / "runs" / stopped["trial"] / "1-grpo" / "checkpoints"
    assert list(checkpoints.glob("interrupted_iter_*")), sorted(p.name for p in checkpoints.iterdir())
