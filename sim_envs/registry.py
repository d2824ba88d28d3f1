"""Task registry: a task is a name bound to a factory that builds a vector env.

Adding a task is one decorated function::

    @register_task("maniskill_pushcube", description="Push a cube to a goal region")
    def pushcube(num_envs: int, **overrides) -> VectorEnv:
        return make_maniskill("PushCube-v1", num_envs, **overrides)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sim_envs.errors import TaskConfigError
from sim_envs.vector_env import VectorEnv


@dataclass(frozen=True)
class TaskEntry:
    name: str
    factory: Callable[..., VectorEnv]
    description: str
    simulator: str
    env_id: str | None = None


_TASKS: dict[str, TaskEntry] = {}


def register_task(name: str, description: str = "", simulator: str = "", env_id: str | None = None):
    """Decorator registering ``factory(num_envs, **overrides) -> VectorEnv`` under ``name``."""

    def decorate(factory):
        if name in _TASKS:
            raise ValueError(f"task {name!r} is already registered")
        _TASKS[name] = TaskEntry(name, factory, description, simulator, env_id)
        return factory

    return decorate


def list_tasks() -> list[str]:
    return sorted(_TASKS)


def get_task(name: str) -> TaskEntry:
    if name not in _TASKS:
        raise TaskConfigError(f"unknown task {name!r}; available tasks: {', '.join(list_tasks())}")
    return _TASKS[name]


def make(task_name: str, num_envs: int = 1, **overrides) -> VectorEnv:
    """Build the vector env of ``task_name`` with ``num_envs`` envs."""
    if not isinstance(num_envs, int) or num_envs < 1:
        raise TaskConfigError(f"num_envs must be a positive integer, got {num_envs!r}")
    return get_task(task_name).factory(num_envs, **overrides)
