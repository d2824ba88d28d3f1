"""The ``logging`` section: where a run's scalars go besides ``metrics.jsonl`` (always written).

TensorBoard by default; Weights & Biases, SwanLab and MLflow on request (``logging.backends=[tensorboard,wandb]``),
each an optional package (``pip install 'embodied-rl[wandb]'``, ``[swanlab]``, ``[mlflow]``, or ``[loggers]`` for
all). Offline is the default: W&B and SwanLab write their runs inside the run directory (``wandb sync DIR`` /
``swanlab sync DIR`` upload them later) and MLflow writes a file store there, so nothing reaches for a network.
Shared by embodied and text runs; checked before anything starts (``validate_logging``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from embodied_rl.config.errors import ConfigError

LOGGING_MODES = ("offline", "online")


@dataclass
class LoggingConfig:
    backends: List[str] = field(default_factory=lambda: ["tensorboard"])
    """Experiment trackers that receive every scalar of ``metrics.jsonl`` at its step: tensorboard, wandb,
    swanlab, mlflow (any of them, or none: ``[]``)."""
    project: str = "embodied-rl"
    """W&B and SwanLab project; MLflow experiment."""
    run_name: Optional[str] = None
    """The run's name in the trackers; None: the run directory's name (a stage: ``<run>/<stage>``)."""
    group: Optional[str] = None
    """Runs read as one experiment (W&B and SwanLab group; MLflow parent run); None: a staged run's directory name
    for its stages, no group for a single run. Give seeds of one setting the same group."""
    tags: List[str] = field(default_factory=list)
    """Tags on the run (W&B and SwanLab tags; MLflow tags with an empty value)."""
    mode: str = "offline"
    """offline: nothing leaves the machine (W&B and SwanLab offline runs in the run directory, MLflow's store a
    local one); online: W&B and SwanLab stream to their servers (logged in beforehand), MLflow to
    ``mlflow_tracking_uri``."""
    entity: Optional[str] = None
    """W&B entity (team or user) for online runs; None: the logged-in user's default."""
    mlflow_tracking_uri: Optional[str] = None
    """MLflow store; None: a file store ``mlruns/`` in the run directory (a staged run's top directory, shared by its
    stages). Offline needs a local one (a path, ``file:`` or ``sqlite:``)."""


def _local_uri(uri: str) -> bool:
    return "://" not in uri or uri.startswith(("file:", "sqlite:"))


def validate_logging(section: LoggingConfig) -> None:
    """Names, mode and URI in range, and each chosen backend's package installed: one ConfigError line naming the
    key otherwise (the install command for a missing package)."""
    from embodied_rl.utils.loggers import BACKENDS, missing_package

    for name in section.backends:
        if name not in BACKENDS:
            raise ConfigError(f"logging.backends contains {name!r}; allowed: {', '.join(BACKENDS)}")
    duplicates = sorted({name for name in section.backends if list(section.backends).count(name) > 1})
    if duplicates:
        raise ConfigError(f"logging.backends contains {duplicates[0]!r} twice; allowed: each backend once")
    if section.mode not in LOGGING_MODES:
        raise ConfigError(f"logging.mode={section.mode!r} is out of range; allowed: {', '.join(LOGGING_MODES)}")
    if not section.project or "/" in section.project:
        raise ConfigError(f"logging.project={section.project!r} is out of range; allowed: a non-empty name "
                          "without '/'")
    uri = section.mlflow_tracking_uri
    if section.mode == "offline" and uri is not None and not _local_uri(uri):
        raise ConfigError(f"logging.mlflow_tracking_uri={uri!r} is a server, but logging.mode='offline'; allowed: "
                          "a local store (a path, file:, sqlite:), or logging.mode=online")
    for name in section.backends:
        problem = missing_package(name)
        if problem:
            raise ConfigError(problem)
