"""A short real training run (PickCube, tiny MLP, PPO, 4 iterations) logging to W&B and MLflow offline: what each
backend stored equals metrics.jsonl, row for row; the run's summary and config are attached."""

import pytest

from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.utils.loggers import readback

pytest.importorskip("wandb", reason="the test extra installs wandb")
pytest.importorskip("mlflow", reason="the test extra installs mlflow-skinny")

TINY = ["stages=[]", "env.num_workers=1", "env.envs_per_worker=2", "env.max_episode_steps=10",
        "rollout.steps_per_iteration=10", "total_env_steps=80", "eval.every_iterations=2", "eval.num_episodes=2",
        "checkpoint.every_iterations=0", "policy.hidden_sizes=[16]", "algorithm.num_minibatches=2",
        "logging.backends=[tensorboard,wandb,mlflow]"]


def test_a_training_runs_scalars_in_wandb_and_mlflow_equal_metrics_jsonl(cluster, tmp_path, monkeypatch):
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(key, "http://127.0.0.1:9")  # no network
    config = load_train_config("maniskill_pickcube", None, TINY)
    (tmp_path / "config.yaml").write_text("task: maniskill_pickcube\n")
    runner = EmbodiedRunner(config, tmp_path)
    runner.run()

    rows = readback.metrics_rows(tmp_path)
    assert [r["env_steps"] for r in rows] == [20, 40, 60, 80]
    assert "eval/success_once" in rows[1] and "eval/success_once" not in rows[0]  # keys that come and go
    scalars = sum(len(r) for r in rows)
    assert readback.compare_wandb(tmp_path) == {"scalars": scalars, "max_abs_difference": 0.0, "rows": 4,
                                                "problems": []}
    assert readback.compare_mlflow(tmp_path) == {"scalars": scalars - len(rows), "max_abs_difference": 0.0,
                                                 "rows": 4, "problems": []}
    stored = readback.wandb_record_kinds(tmp_path)
    assert stored["summary"]["summary/env_steps"] == 80 and stored["summary"]["summary/iterations"] == 4
    assert stored["summary"]["summary/eval/success_once"] == runner.summary["eval/success_once"]
    config_keys = {item.key for item in stored["run"].config.update}
    assert {"task", "algorithm", "policy", "env", "logging"} <= config_keys


@pytest.mark.slow
def test_a_text_runs_rows_sharing_step_0_stay_apart_in_wandb_and_mlflow(tmp_path):
    """math_arith logs its start and SFT evaluations both at 0 responses: W&B keeps them as two rows (its own step
    counts rows; env_steps is the x axis), MLflow as two values at step 0."""
    from conftest import run_cli

    run_dir = tmp_path / "run"
    small = ["env.count=200", "env.heldout_count=20", "sft.steps=5", "sft.batch_size=16", "rl.iterations=1",
             "rl.prompts_per_iteration=4", "algorithm.group_size=4", "eval.num_problems=4",
             "rollout.max_new_tokens=4", "torch_threads=1", "logging.backends=[wandb,mlflow]"]
    result = run_cli("train", "--task", "math_arith", "--run-dir", str(run_dir), *small, cwd=tmp_path,
                     env={"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"})
    assert result.returncode == 0, result.stderr[-3000:]
    rows = readback.metrics_rows(run_dir)
    assert [r["env_steps"] for r in rows[:2]] == [0, 0] and len(rows) == 3
    assert readback.compare_wandb(run_dir)["problems"] == [] and readback.compare_wandb(run_dir)["rows"] == 3
    mlflow = readback.compare_mlflow(run_dir)
    assert mlflow["problems"] == [] and mlflow["max_abs_difference"] == 0.0
    assert readback.mlflow_history(run_dir)["time/eval_s"][0][0] == readback.mlflow_history(run_dir)["time/eval_s"][1][0] == 0
    assert not (run_dir / "tensorboard").exists()  # only the backends asked for
