"""Simulator tasks behind one registry: ``make(task, num_envs, **overrides)`` (a name or a ``TaskEntry``),
``get_task(name)`` and ``list_tasks()``.

Importing this package registers the built-in tasks; it imports no runtime code.
"""

from sim_envs.errors import SimulatorUnavailableError, TaskConfigError
from sim_envs.registry import TaskEntry, get_task, list_tasks, make, register_task
from sim_envs.vector_env import StepBatch, VectorEnv

from sim_envs.maniskill import tasks as _maniskill_tasks  # noqa: F401  (registers tasks)
from sim_envs.math import tasks as _math_tasks  # noqa: F401  (registers tasks)
from sim_envs.metaworld import tasks as _metaworld_tasks  # noqa: F401  (registers tasks)
from sim_envs.robosuite import tasks as _robosuite_tasks  # noqa: F401  (registers tasks)
from sim_envs.gymnasium_envs import tasks as _gymnasium_tasks  # noqa: F401  (resolves gym:<id> tasks)

__all__ = [
    "make", "list_tasks", "get_task", "register_task", "TaskEntry", "StepBatch", "VectorEnv",
    "TaskConfigError", "SimulatorUnavailableError",
]
