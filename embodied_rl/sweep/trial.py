"""One sweep trial, as a Ray Tune function trainable: ``embodied-rl train`` in a child process on the trial's
node (its own local Ray, sized to the trial's resource request), its evaluations reported to Tune as they land in
``metrics.jsonl``, so a scheduler can stop a hopeless trial.

Reported: ``success`` (the last ``eval/success_once``), ``env_steps`` (stages end to end), ``wall_s``, ``trial``
(its name), and once trained to its end ``finished`` (Tune's own ``done`` is true for stopped trials too).

A trial the scheduler stops: Tune ends its actor and Ray ends the actor's child processes with it; the training
command's driver, in a session of its own (``runtime/driver_session.py``), then gets SIGTERM and writes a stop
checkpoint before it shuts its Ray down. The child's SIGINT below covers the trial function ending any other way
while the child still runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from embodied_rl.analysis.runs import SUCCESS_KEY, is_run_dir, load_run
from embodied_rl.runtime.driver_session import stop_when_parent_dies
from embodied_rl.sweep.space import override_text, trial_name

POLL_S = 2.0
INTERRUPT_GRACE_S = 120.0
"""A trial function that ends while its child runs sends it SIGINT (stop checkpoint, workers shut down), then
SIGKILL after this long."""
KILL_WAIT_S = 30.0
"""How long the child may take to exit after SIGKILL."""


def _child_env() -> dict:
    """This actor's environment less Ray's own variables: the child starts a private Ray, not a worker's."""
    return {key: value for key, value in os.environ.items()
            if not key.startswith("RAY_") or key in ("RAY_USAGE_STATS_ENABLED", "RAY_DEDUP_LOGS")}


class MetricsTail:
    """Evaluations of a run directory not reported yet, read as ``analysis.runs`` reads runs (stages end to end;
    a line still being written is skipped until it is whole)."""

    def __init__(self, run_dir: Path):
        self.run_dir, self.reported = run_dir, 0
        self.success = None

    def new_reports(self) -> list[dict]:
        if not is_run_dir(self.run_dir):
            return []
        points = load_run(self.run_dir).points(SUCCESS_KEY)
        fresh, self.reported = points[self.reported:], len(points)
        if fresh:
            self.success = fresh[-1][2]
        return [{"success": value, "env_steps": steps, "wall_s": wall or 0.0} for steps, wall, value in fresh]


def run_trial(config: dict, sweep: dict) -> None:
    """Tune's function trainable. ``config``: the trial's point, ``overrides`` (key -> value) and ``seed``;
    ``sweep``: what every trial shares (task, config_file, base overrides, out_dir, cpus)."""
    from ray import tune

    index = int(tune.get_context().get_trial_id().rsplit("_", 1)[-1])
    name = trial_name(index, config["overrides"], config["seed"])
    out_dir = Path(sweep["out_dir"])
    run_dir, log_path = out_dir / "runs" / name, out_dir / "logs" / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    overrides = [*sweep["overrides"], *(override_text(k, v) for k, v in config["overrides"].items()),
                 f"seed={config['seed']}"]
    if sweep.get("cpus"):
        overrides.append(f"cluster.num_cpus={sweep['cpus']}")
    command = [sys.executable, "-m", "embodied_rl.cli", "train", "--task", sweep["task"], "--run-dir", str(run_dir)]
    if sweep.get("config_file"):
        command += ["--config", sweep["config_file"]]
    tail = MetricsTail(run_dir)
    last = {"success": float("nan"), "env_steps": 0.0, "wall_s": 0.0}
    with open(log_path, "w") as log:
        child = subprocess.Popen(command + overrides, stdout=log, stderr=subprocess.STDOUT, env=_child_env(),
                                 preexec_fn=stop_when_parent_dies)  # SIGTERM if the trial actor is killed outright
        try:
            while child.poll() is None:
                time.sleep(POLL_S)
                for last in tail.new_reports():
                    tune.report({**last, "trial": name})
            for last in tail.new_reports():
                tune.report({**last, "trial": name})
        finally:
            if child.poll() is None:  # stopped by the scheduler (or the sweep interrupted)
                child.send_signal(signal.SIGINT)
                try:
                    child.wait(INTERRUPT_GRACE_S)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait(KILL_WAIT_S)  # raises TimeoutExpired naming the child if even SIGKILL did not end it
    if child.returncode != 0:
        line = log_path.read_text().strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"trial {name} failed (exit {child.returncode}; log {log_path}): {line[0]}")
    tune.report({**last, "trial": name, "finished": True})  # trained to its end (a stopped trial never gets here)
