"""Experiment trackers beside ``metrics.jsonl``: one module per backend, each a ``Tracker`` (``base.py``).

``MetricsLog`` (``utils/metrics_log.py``) writes every row of ``metrics.jsonl`` and hands the same row, at the same
step, to each tracker the run's ``logging.backends`` names; a tracker's package is imported only when it is chosen,
and its absence is found at config check time (``missing_package``) with the command that installs it.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    """A tracker backend: ``module`` (``embodied_rl.utils.loggers.<module>``, its class ``Tracker``), the
    third-party ``package`` it imports, and the ``extra`` of embodied-rl that installs it."""
    module: str
    package: str
    extra: str


BACKENDS = {
    "tensorboard": Backend("tensorboard_tracker", "tensorboard", ""),
    "wandb": Backend("wandb_tracker", "wandb", "wandb"),
    "swanlab": Backend("swanlab_tracker", "swanlab", "swanlab"),
    "mlflow": Backend("mlflow_tracker", "mlflow", "mlflow"),
}
"""Backends by the name ``logging.backends`` uses."""


def install_command(name: str) -> str:
    backend = BACKENDS[name]
    return f"pip install 'embodied-rl[{backend.extra}]'" if backend.extra else f"pip install {backend.package}"


def missing_package(name: str) -> str | None:
    """None when backend ``name``'s package can be imported; else the one line that says how to install it."""
    package = BACKENDS[name].package
    try:
        found = importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a parent package that fails, a module without a spec
        found = False
    if found:
        return None
    return (f"logging.backends contains {name!r} but the {package} package is not installed; install it with: "
            f"{install_command(name)}")


def tracker_class(name: str):
    """The ``Tracker`` class of backend ``name`` (its module imported now)."""
    return importlib.import_module(f"{__name__}.{BACKENDS[name].module}").Tracker
