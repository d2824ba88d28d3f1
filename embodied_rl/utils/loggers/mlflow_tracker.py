"""MLflow: one MLflow run per run directory, by default in a file store ``mlruns/`` inside the run directory.

Every scalar of a ``metrics.jsonl`` row is a metric at the row's step (env steps; an SFT stage's iteration).
The resolved config is the run's params (dotted keys) and ``config.yaml`` an artifact; evaluation videos are
artifacts under ``videos/``; the summary is the artifact ``summary.json``. Runs of one ``logging.group`` (a staged
run's stages) are children of one parent run named for the group. The run id is kept in ``tracker_runs.json``:
a resumed run continues it. MLflow 3 keeps its file store only on request (``MLFLOW_ALLOW_FILE_STORE``), which this
tracker sets while it runs; see it with ``mlflow ui --backend-store-uri <run dir>/mlruns``.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

from embodied_rl.utils.loggers.base import RunInfo, Tracker as BaseTracker, resumed_id, save_run_id

MLRUNS_DIR = "mlruns"
STATUSES = {"finished": "FINISHED", "failed": "FAILED", "killed": "KILLED"}
GROUP_TAG = "embodied_rl.group"
PARENT_TAG = "embodied_rl.parent"
PARAM_VALUE_LIMIT = 6000  # MLflow refuses longer param values
PARAMS_PER_BATCH = 100  # and more params in one call


def tracking_uri(setting: str | None, run_dir: Path) -> str:
    """``logging.mlflow_tracking_uri`` as MLflow takes it: None -> ``<run_dir>/mlruns``; a path -> a file URI."""
    if setting is None:
        return (Path(run_dir) / MLRUNS_DIR).resolve().as_uri()
    if "://" not in setting and not setting.startswith(("file:", "sqlite:")):
        return Path(setting).resolve().as_uri()
    return setting


@contextmanager
def file_store_allowed(uri: str):
    """``MLFLOW_ALLOW_FILE_STORE=true`` while inside, for a file store URI (restored after)."""
    if not uri.startswith("file:"):
        yield
        return
    before = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
        else:
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = before


def flat_params(config: dict, prefix: str = "") -> dict:
    """A nested config as MLflow params: dotted keys, values as text (cut to MLflow's limit)."""
    flat = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flat_params(value, f"{name}."))
        else:
            flat[name] = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    return {k: v[:PARAM_VALUE_LIMIT] for k, v in flat.items()}


class Tracker(BaseTracker):
    name = "mlflow"

    def __init__(self, run: RunInfo):
        from mlflow.tracking import MlflowClient

        self.uri = tracking_uri(run.settings.mlflow_tracking_uri, run.run_dir)
        self._allowed = file_store_allowed(self.uri)
        self._allowed.__enter__()  # for the tracker's lifetime: MLflow builds its store at every call
        try:
            self.client = MlflowClient(tracking_uri=self.uri)
            self._open(run)
        except BaseException:
            self._allowed.__exit__(None, None, None)
            raise

    def _open(self, run: RunInfo) -> None:
        s, client = run.settings, self.client
        experiment = client.get_experiment_by_name(s.project)
        self.experiment_id = experiment.experiment_id if experiment else client.create_experiment(s.project)
        previous = resumed_id(run, self.name, "run_id")
        self.parent_id = self._parent(s.group) if s.group else None
        if previous:
            self.run_id = previous
            client.update_run(previous, status="RUNNING")
        else:
            tags = {tag: "" for tag in s.tags}
            if s.group:
                tags.update({GROUP_TAG: s.group, "mlflow.parentRunId": self.parent_id})
            self.run_id = client.create_run(self.experiment_id, run_name=run.name, tags=tags).info.run_id
            params = [(k, v) for k, v in flat_params(run.config).items()]
            from mlflow.entities import Param

            for start in range(0, len(params), PARAMS_PER_BATCH):
                client.log_batch(self.run_id, params=[Param(k, v) for k, v in params[start:start + PARAMS_PER_BATCH]])
            if run.config_file is not None and Path(run.config_file).is_file():
                client.log_artifact(self.run_id, str(run.config_file))
        save_run_id(run.run_dir, self.name, {"run_id": self.run_id, "experiment_id": self.experiment_id,
                                             "tracking_uri": self.uri, "step_key": run.step_key})

    def _parent(self, group: str) -> str:
        """The group's parent run (created by its first member)."""
        found = self.client.search_runs([self.experiment_id], f"tags.`{GROUP_TAG}` = '{group}' and "
                                        f"tags.`{PARENT_TAG}` = 'true'", max_results=1)
        if found:
            self.client.update_run(found[0].info.run_id, status="RUNNING")
            return found[0].info.run_id
        return self.client.create_run(self.experiment_id, run_name=group,
                                      tags={GROUP_TAG: group, PARENT_TAG: "true"}).info.run_id

    def log(self, row: dict, step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(key, value, now, step) for key, value in row.items()
                                                    if key != "env_steps"])

    def log_video(self, path: Path, step: int) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path="videos")

    def close(self, summary: dict | None, status: str) -> None:
        try:
            if summary:
                self.client.log_dict(self.run_id, summary, "summary.json")
            self.client.set_terminated(self.run_id, STATUSES.get(status, "FAILED"))
            if self.parent_id:  # the group ends as its latest member did (a later stage reopens it)
                self.client.set_terminated(self.parent_id, STATUSES.get(status, "FAILED"))
        finally:
            self._allowed.__exit__(None, None, None)
