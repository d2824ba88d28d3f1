"""Importing robosuite quietly and building what ``robosuite.make`` takes.

robosuite's import has two side effects handled here: it logs a macro-file warning and two missing-extra warnings at
every import (filtered: they are not the user's problem), and with its default macro ``MUJOCO_GPU_RENDERING`` it sets
``os.environ["MUJOCO_GL"] = "egl"`` for the whole process. ``import_robosuite`` restores the variable (a MetaWorld env
built later in the process then still probes for its GL backend) and, for envs that render, picks the backend first
(``sim_envs.mujoco_gl.select_gl_backend``, shared by the MuJoCo families) and points robosuite's renderer at it.
"""

from __future__ import annotations

import logging
import os

from sim_envs.errors import SimulatorUnavailableError

LOGGER = "robosuite_logs"
QUIET_PREFIXES = ("No private macro file", "It is recommended to use a private macro file", "To setup, run:",
                  "Could not import robosuite_models", "Could not load the mink-based whole-body IK")


class _QuietFilter(logging.Filter):
    """Drops robosuite's INFO lines (a controller file loaded per env) and its import-time warnings."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return False
        return not str(record.msg).startswith(QUIET_PREFIXES)


def import_robosuite(renders: bool = False):
    """``robosuite``, imported once per process without its noise; with ``renders`` MuJoCo's GL backend is chosen
    (and robosuite's renderer told) before any context is made."""
    backend = None
    if renders:
        from sim_envs.mujoco_gl import select_gl_backend

        backend = select_gl_backend()
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(f, _QuietFilter) for f in logger.filters):
        logger.addFilter(_QuietFilter())
    before = os.environ.get("MUJOCO_GL")
    try:
        import robosuite
        from robosuite.utils import binding_utils
    except ImportError as error:
        raise SimulatorUnavailableError(f"robosuite is not installed ({error}); install it with "
                                        "`pip install robosuite==1.5.2`") from None
    finally:
        if before is None:
            os.environ.pop("MUJOCO_GL", None)
        else:
            os.environ["MUJOCO_GL"] = before
    if backend is not None:
        binding_utils._MUJOCO_GL = backend  # read when robosuite makes its off-screen context
    return robosuite


def controller_config(control_mode: str, robot: str) -> dict:
    """robosuite's composite controller config: the robot's default body (``BASIC``) with the arm's controller
    ``control_mode`` (an ``options.CONTROL_MODES`` name) and its default gripper controller."""
    import_robosuite()
    from robosuite.controllers import load_part_controller_config
    from robosuite.controllers.composite.composite_controller_factory import refactor_composite_controller_config

    part = load_part_controller_config(default_controller=control_mode.upper())
    return refactor_composite_controller_config(part, robot, ["right"])
