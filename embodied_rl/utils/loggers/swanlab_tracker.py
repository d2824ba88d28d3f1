"""SwanLab: one SwanLab run per run directory, its files in ``<run dir>/swanlog/``.

Every scalar of a ``metrics.jsonl`` row is logged at the row's step; the resolved config is the run's config and
``config.yaml`` one of its files. SwanLab's ``Video`` takes GIFs only, so an evaluation's mp4 is attached as a file
(``save``). The summary goes into the config under ``summary``. Offline (the default) nothing leaves the machine:
``swanlab sync <run dir>/swanlog/run-*`` uploads it later. A resumed run continues the same SwanLab run id.
"""

from __future__ import annotations

from pathlib import Path

from embodied_rl.utils.loggers.base import RunInfo, Tracker as BaseTracker, resumed_id, save_run_id

SWANLOG_DIR = "swanlog"
STATES = {"finished": "success", "failed": "crashed", "killed": "aborted"}


class Tracker(BaseTracker):
    name = "swanlab"

    def __init__(self, run: RunInfo):
        import swanlab

        s = run.settings
        self.run_dir = run.run_dir
        previous = resumed_id(run, self.name)
        self.run = swanlab.init(project=s.project, name=run.name, group=s.group, tags=list(s.tags) or None,
                                log_dir=str(run.run_dir / SWANLOG_DIR), mode="offline" if run.offline else "online",
                                workspace=s.entity, config=run.config, id=previous,
                                resume="allow" if previous else None, reinit=True)
        save_run_id(run.run_dir, self.name, {"id": self.run.id, "project": s.project})
        if run.config_file is not None and Path(run.config_file).is_file():
            self.run.save(str(run.config_file), base_path=str(Path(run.config_file).parent), policy="now")

    def log(self, row: dict, step: int) -> None:
        self.run.log({key: value for key, value in row.items() if key != "env_steps"}, step=int(step))

    def log_video(self, path: Path, step: int) -> None:
        self.run.save(str(path), base_path=str(self.run_dir), policy="now")

    def close(self, summary: dict | None, status: str) -> None:
        if summary:
            self.run.config.update({"summary": summary})
        state = STATES.get(status, "crashed")
        self.run.finish(state=state, error=None if state != "crashed" else "the training run raised an exception")
