"""Trackers beside metrics.jsonl, with the real wandb and mlflow packages (offline, no mocks): every scalar reaches
each backend at its step, read back from what the backend stored; config, videos and summary attached; runs
resumed and stages grouped; bad settings and missing packages refused in one line."""

import json
import math
import subprocess
import sys
import time

import numpy as np
import pytest

from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.config.logging_section import LoggingConfig
from embodied_rl.utils.loggers import missing_package, readback
from embodied_rl.utils.loggers.base import saved_run_ids
from embodied_rl.utils.metrics_log import MetricsLog

pytest.importorskip("wandb", reason="the test extra installs wandb")
pytest.importorskip("mlflow", reason="the test extra installs mlflow-skinny")

CONFIG = "seed: 3\npolicy:\n  hidden_sizes: [16, 16]\n  name: mlp\n"
# Rows as runs log them: None dropped, a NaN, a tiny and a huge value, two rows at one step (a text run's start and
# SFT evaluations), a key that appears only in some rows (evaluations).
ROWS = [({"train/loss": 1 / 3, "train/iteration": 0, "eval/start": 0.25}, 0),
        ({"train/loss": 2 / 3, "train/iteration": 0, "eval/skipped": None}, 0),
        ({"train/loss": math.nan, "train/iteration": 1, "tiny": 1e-300}, 40),
        ({"train/loss": 0.1 + 0.2, "train/iteration": 2, "huge": 123456789.123456789, "eval/success_once": 0.5}, 80)]


def _offline_environment(monkeypatch):
    """A machine without a network: every proxy a closed local port, so any attempt fails (or hangs) at once."""
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(key, "http://127.0.0.1:9")
    monkeypatch.delenv("WANDB_MODE", raising=False)


def _logged(run_dir, backends=("tensorboard", "wandb", "mlflow"), rows=ROWS, summary=None, step_key="env_steps",
            resumed_at=None, **settings):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(CONFIG)
    log = MetricsLog(run_dir, resumed_at, LoggingConfig(backends=list(backends), **settings), CONFIG, step_key)
    for scalars, env_steps in rows:
        log.log(scalars, env_steps)
    log.close(summary, "finished")
    return readback.metrics_rows(run_dir)


def test_every_scalar_of_metrics_jsonl_reaches_wandb_and_mlflow_with_its_value_and_step(tmp_path, monkeypatch):
    _offline_environment(monkeypatch)
    started = time.perf_counter()
    rows = _logged(tmp_path, summary={"run_dir": str(tmp_path), "wall_s": 1.5, "best_success_once": 0.5})
    assert time.perf_counter() - started < 60  # offline: nothing waits on a network
    assert len(rows) == 4 and "eval/skipped" not in rows[1]

    history = readback.wandb_history(tmp_path)
    assert len(history) == len(rows)
    for want, got in zip(rows, history):
        assert set(got) == set(want)
        assert all(got[k] == want[k] or (math.isnan(got[k]) and math.isnan(want[k])) for k in want)
    result = readback.compare_wandb(tmp_path)
    assert result == {"scalars": 16, "max_abs_difference": 0.0, "rows": 4, "problems": []}

    stored = readback.mlflow_history(tmp_path)
    assert stored["train/loss"][:2] == [(0, 1 / 3), (0, 2 / 3)] and math.isnan(stored["train/loss"][2][1])
    assert stored["train/loss"][3] == (80, 0.1 + 0.2) and stored["huge"] == [(80, 123456789.123456789)]
    assert stored["eval/start"] == [(0, 0.25)] and stored["tiny"] == [(40, 1e-300)]
    assert "env_steps" not in stored  # the step itself, not a metric
    assert readback.compare_mlflow(tmp_path) == {"scalars": 12, "max_abs_difference": 0.0, "rows": 4,
                                                 "problems": []}


def test_a_changed_value_is_caught_by_the_comparison(tmp_path, monkeypatch):
    """The readback compares what was stored: a row of metrics.jsonl edited afterwards no longer matches."""
    _offline_environment(monkeypatch)
    _logged(tmp_path)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    row = json.loads(lines[3])
    row["huge"] += 0.5
    lines[3] = json.dumps(row)
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert readback.compare_wandb(tmp_path)["max_abs_difference"] == 0.5
    assert readback.compare_mlflow(tmp_path)["max_abs_difference"] == 0.5


def test_config_and_summary_are_attached(tmp_path, monkeypatch):
    _offline_environment(monkeypatch)
    _logged(tmp_path, summary={"wall_s": 2.5, "best_success_once": 0.75}, run_name="seed3", tags=["paper"])
    w = readback.wandb_record_kinds(tmp_path)
    config = {item.key: json.loads(item.value_json) for item in w["run"].config.update}
    assert config["seed"] == 3 and config["policy"] == {"hidden_sizes": [16, 16], "name": "mlp"}
    assert w["run"].display_name == "seed3" and list(w["run"].tags) == ["paper"]
    assert "config.yaml" in w["files"]
    assert w["summary"]["summary/wall_s"] == 2.5 and w["summary"]["summary/best_success_once"] == 0.75

    from embodied_rl.utils.loggers.mlflow_tracker import file_store_allowed

    entry = saved_run_ids(tmp_path)["mlflow"]
    with file_store_allowed(entry["tracking_uri"]):
        client, run_id = readback.mlflow_client(tmp_path)
        run = client.get_run(run_id)
        assert run.data.params["seed"] == "3" and run.data.params["policy.hidden_sizes"] == "[16, 16]"
        assert run.info.status == "FINISHED" and run.info.run_name == "seed3" and "paper" in run.data.tags
        artifacts = {a.path for a in client.list_artifacts(run_id)}
        assert {"config.yaml", "summary.json"} <= artifacts
        summary = json.loads((tmp_path / "mlruns" / entry["experiment_id"] / run_id / "artifacts" /
                              "summary.json").read_text())
        assert summary == {"wall_s": 2.5, "best_success_once": 0.75}


def test_an_evaluation_video_is_attached_where_the_backend_keeps_files(tmp_path, monkeypatch):
    from embodied_rl.utils.video import write_episode_video

    _offline_environment(monkeypatch)
    video = write_episode_video(tmp_path / "videos" / "eval_iter_000002.mp4",
                                np.full((4, 1, 32, 32, 3), 100, np.uint8), np.zeros((4, 1), bool), fps=20)
    (tmp_path / "config.yaml").write_text(CONFIG)
    log = MetricsLog(tmp_path, None, LoggingConfig(backends=["wandb", "mlflow"]), CONFIG)
    log.log({"train/loss": 1.0}, 40)
    log.log_video(video, 80)  # filmed by the evaluation whose row follows
    log.log({"train/loss": 0.5, "eval/success_once": 0.0}, 80)
    log.close(None, "finished")

    assert readback.compare_wandb(tmp_path)["problems"] == []
    assert any(path.startswith("media/videos/eval/video") and path.endswith(".mp4")
               for path in readback.wandb_record_kinds(tmp_path)["files"])
    entry = saved_run_ids(tmp_path)["mlflow"]
    stored = tmp_path / "mlruns" / entry["experiment_id"] / entry["run_id"] / "artifacts" / "videos" / video.name
    assert stored.read_bytes() == video.read_bytes()


def test_an_sft_stage_is_stepped_by_iteration_since_its_env_steps_stay_zero(tmp_path, monkeypatch):
    _offline_environment(monkeypatch)
    rows = [({"train/sft_loss": 1.0 / i, "train/iteration": i}, 0) for i in range(1, 4)]
    _logged(tmp_path, rows=rows, step_key="train/iteration")
    assert readback.mlflow_history(tmp_path)["train/sft_loss"] == [(1, 1.0), (2, 0.5), (3, 1 / 3)]
    assert readback.compare_mlflow(tmp_path)["problems"] == []
    w = readback.wandb_history(tmp_path)
    assert [r["train/iteration"] for r in w] == [1, 2, 3] and [r["env_steps"] for r in w] == [0, 0, 0]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/sft_loss")] == [1, 2, 3]


def test_a_resumed_run_continues_the_same_tracker_runs(tmp_path, monkeypatch):
    _offline_environment(monkeypatch)
    _logged(tmp_path, rows=ROWS[2:])
    first = saved_run_ids(tmp_path)
    _logged(tmp_path, rows=[({"train/loss": 0.25, "train/iteration": 2}, 80)], resumed_at=40)
    again = saved_run_ids(tmp_path)
    assert again["wandb"]["id"] == first["wandb"]["id"]
    assert again["mlflow"]["run_id"] == first["mlflow"]["run_id"]
    assert [r["env_steps"] for r in readback.metrics_rows(tmp_path)] == [40, 80]  # the row past 40 replaced
    assert len(readback.wandb_files(tmp_path)) == 2  # W&B's offline resume: a second file of the same run id
    assert readback.mlflow_history(tmp_path)["train/loss"][-1] == (80, 0.25)
    _logged(tmp_path / "fresh", rows=ROWS[2:])
    assert saved_run_ids(tmp_path / "fresh")["wandb"]["id"] != first["wandb"]["id"]  # a new run: a new id


def test_stages_of_one_group_are_children_of_one_mlflow_parent_and_one_wandb_group(tmp_path, monkeypatch):
    _offline_environment(monkeypatch)
    store = str(tmp_path / "mlruns")
    for stage in ("0-sft", "1-grpo"):
        _logged(tmp_path / stage, group="run7", run_name=f"run7/{stage}", mlflow_tracking_uri=store)
    from embodied_rl.utils.loggers.mlflow_tracker import file_store_allowed

    parents = []
    for stage in ("0-sft", "1-grpo"):
        assert readback.wandb_record_kinds(tmp_path / stage)["run"].run_group == "run7"
        with file_store_allowed("file:"):
            client, run_id = readback.mlflow_client(tmp_path / stage)
            parents.append(client.get_run(run_id).data.tags["mlflow.parentRunId"])
        assert readback.compare_mlflow(tmp_path / stage)["problems"] == []
    with file_store_allowed("file:"):
        parent = client.get_run(parents[0])
    assert parents[0] == parents[1] and parent.info.run_name == "run7" and parent.info.status == "FINISHED"


@pytest.mark.parametrize("override, fragments", [
    ("logging.backends=[tensorboard,neptune]", ["logging.backends contains 'neptune'",
                                                "tensorboard, wandb, swanlab, mlflow"]),
    ("logging.backends=[wandb,wandb]", ["'wandb' twice"]),
    ("logging.mode=cloud", ["logging.mode='cloud'", "offline, online"]),
    ("logging.mlflow_tracking_uri=http://tracking:5000", ["logging.mlflow_tracking_uri", "offline"]),
    ("logging.project=a/b", ["logging.project='a/b'"]),
])
def test_bad_logging_settings_are_refused_in_one_line(override, fragments):
    with pytest.raises(ConfigError) as error:
        load_train_config("maniskill_pickcube", None, ["stages=[]", override])
    assert all(fragment in str(error.value) for fragment in fragments) and "\n" not in str(error.value)


def test_backends_are_chosen_on_the_command_line():
    config = load_train_config("maniskill_pickcube", None, ["stages=[]", "logging.backends=[tensorboard,wandb,mlflow]",
                                                            "logging.mode=online"])
    assert config.logging.backends == ["tensorboard", "wandb", "mlflow"] and config.logging.mode == "online"
    assert load_train_config("maniskill_pickcube", None, ["stages=[]"]).logging.backends == ["tensorboard"]


def test_a_missing_package_names_its_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if wandb were not installed
    expected = ("logging.backends contains 'wandb' but the wandb package is not installed; install it with: "
                "pip install 'embodied-rl[wandb]'")
    assert missing_package("wandb") == expected and missing_package("mlflow") is None
    with pytest.raises(ConfigError) as error:
        load_train_config("maniskill_pickcube", None, ["stages=[]", "logging.backends=[tensorboard,wandb]"])
    assert str(error.value) == expected


def test_a_missing_package_exits_2_with_one_line_before_anything_starts(tmp_path):
    """Through the real entry point: nothing is created, no worker is started."""
    script = ("import sys; sys.modules['mlflow'] = None; from embodied_rl.cli import main; "
              f"sys.exit(main(['train', '--task', 'maniskill_pickcube', '--run-dir', {str(tmp_path / 'run')!r}, "
              "'stages=[]', 'logging.backends=[mlflow]']))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "logging.backends contains 'mlflow' but the mlflow package is not installed; install it with: pip " \
           "install 'embodied-rl[mlflow]'" in lines[0]
    assert not (tmp_path / "run").exists()


def test_a_tracker_that_fails_mid_run_is_dropped_and_metrics_jsonl_stays_complete(tmp_path, monkeypatch, capsys):
    _offline_environment(monkeypatch)
    (tmp_path / "config.yaml").write_text(CONFIG)
    log = MetricsLog(tmp_path, None, LoggingConfig(backends=["mlflow"]), CONFIG)
    log.log({"a": 1.0}, 1)
    log.trackers[0].run_id = "no-such-run"  # its run gone from the store
    log.log({"a": 2.0}, 2)
    log.log({"a": 3.0}, 3)
    log.close(None, "finished")
    assert [r["a"] for r in readback.metrics_rows(tmp_path)] == [1.0, 2.0, 3.0]
    warnings = [line for line in capsys.readouterr().err.splitlines() if "logging backend mlflow failed" in line]
    assert len(warnings) == 1 and "metrics.jsonl is complete" in warnings[0]


def test_swanlab_logs_offline_into_the_run_directory(tmp_path, monkeypatch):
    pytest.importorskip("swanlab", reason="SwanLab is optional: its package pins protobuf < 7, which the test "
                                          "environment's other packages outgrew; pip install 'embodied-rl[swanlab]'")
    _offline_environment(monkeypatch)
    _logged(tmp_path, backends=("swanlab",), summary={"wall_s": 1.0})
    run_id = saved_run_ids(tmp_path)["swanlab"]["id"]
    runs = list((tmp_path / "swanlog").glob(f"run-*-{run_id}"))
    assert len(runs) == 1 and (runs[0] / f"run-{run_id}.swanlab").stat().st_size > 0
    assert (runs[0] / "files" / "config.yaml").is_file()
