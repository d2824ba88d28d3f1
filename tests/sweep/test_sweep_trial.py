"""A trial's reports: evaluation rows of its run directory as they land, stages end to end, no half line."""

import json

from embodied_rl.sweep.trial import MetricsTail


def _append(path, *rows, cut=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write("".join(json.dumps(row) + "\n" for row in rows) + cut)


def test_new_evaluations_are_reported_once_stages_end_to_end(tmp_path):
    tail = MetricsTail(tmp_path)
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    assert tail.new_reports() == []
    _append(tmp_path / "0-sft" / "metrics.jsonl", {"env_steps": 0, "time/elapsed_s": 50.0, "eval/success_once": 0.25})
    assert tail.new_reports() == [{"success": 0.25, "env_steps": 0.0, "wall_s": 50.0}]
    _append(tmp_path / "1-grpo" / "metrics.jsonl", {"env_steps": 100, "time/elapsed_s": 5.0},
            {"env_steps": 200, "time/elapsed_s": 10.0, "eval/success_once": 0.5}, cut='{"env_steps": 300, "ev')
    assert tail.new_reports() == [{"success": 0.5, "env_steps": 200.0, "wall_s": 60.0}]  # the cut line waits
    assert tail.new_reports() == []
    with open(tmp_path / "1-grpo" / "metrics.jsonl", "a") as handle:
        handle.write('al/success_once": 0.75, "time/elapsed_s": 15.0}\n')
    assert tail.new_reports() == [{"success": 0.75, "env_steps": 300.0, "wall_s": 65.0}]
    assert tail.success == 0.75


def test_a_trials_status_tells_finished_from_stopped_and_failed():
    from types import SimpleNamespace

    from embodied_rl.commands.sweep import _trial_rows

    point = {"overrides": {"algorithm.lr": 1e-3}, "seed": 1}
    results = [SimpleNamespace(metrics={"trial": "a", "success": 0.5, "env_steps": 800.0, "finished": True,
                                        "done": True}, config=point, error=None, path="/x/a"),
               SimpleNamespace(metrics={"trial": "b", "success": 0.0, "env_steps": 400.0, "done": True},
                               config=point, error=None, path="/x/b"),  # Tune marks stopped trials done too
               SimpleNamespace(metrics={}, config=point, error=RuntimeError("trial c failed\nexit 1"), path="/x/c")]
    rows = _trial_rows(results)
    assert [(r["trial"], r["status"]) for r in rows] == [("a", "done"), ("b", "stopped early"), ("c", "error")]
    assert rows[0]["overrides"] == {"algorithm.lr": "0.001"} and rows[0]["seed"] == 1 and rows[2]["success"] is None
    assert rows[2]["error"] == "exit 1"
