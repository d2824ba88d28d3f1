"""Task registry: a task is a name bound to a factory that builds a vector env.

Adding a task is one decorated function::

    @register_task("maniskill_pushcube", description="Push a cube to a goal region")
    def pushcube(num_envs: int, **overrides) -> VectorEnv:
        return make_maniskill("PushCube-v1", num_envs, **overrides)

A task's ``TaskEntry`` is what travels to the processes that build its envs (``make`` takes an entry as well as a
name), so a task registered only in the driver (even in its ``__main__``) reaches workers that never ran the
decorator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sim_envs.errors import TaskConfigError
from sim_envs.instructions import InstructedEnv
from sim_envs.vector_env import VectorEnv


@dataclass(frozen=True)
class TaskEntry:
    """A registered task. Picklable (with cloudpickle when ``factory`` lives in ``__main__``), so it can be sent
    to another process and built there with ``make(entry, ...)``."""

    name: str
    factory: Callable[..., VectorEnv]
    description: str
    simulator: str
    env_id: str | None = None
    builtin: bool = False  # shipped with sim_envs (the trainer then requires a recipe for it)
    instruction: str | None = None  # language instruction added to dict (camera) observations, see instructions.py
    ood_instruction: str | None = None  # a held-out paraphrase of it (the ``semantic`` out-of-distribution split)
    recipe: str | None = None  # a task that is not built in: the shared recipe it starts from (e.g. ``gym``)
    discrete_actions: int = 0  # n > 0: the env takes one of n actions, as a one-hot (argmax) vector ``[n]``


_TASKS: dict[str, TaskEntry] = {}
_RESOLVERS: dict[str, Callable[[str], TaskEntry]] = {}
"""Name prefix (``gym:``) -> a function building the entry of a task named by that prefix and an id."""


def register_task_prefix(prefix: str, resolver: Callable[[str], TaskEntry]) -> None:
    """Tasks named ``<prefix><id>`` (``gym:CartPole-v1``) are built on first use by ``resolver(name)``, which
    returns their ``TaskEntry`` or raises a one-line ``TaskConfigError`` (an unknown id)."""
    if prefix in _RESOLVERS:
        raise ValueError(f"task prefix {prefix!r} is already registered")
    _RESOLVERS[prefix] = resolver


def register_task(name: str, description: str = "", simulator: str = "", env_id: str | None = None,
                  builtin: bool = False, instruction: str | None = None, ood_instruction: str | None = None):
    """Decorator registering ``factory(num_envs, **overrides) -> VectorEnv`` under ``name``.

    ``instruction``: the task in words; ``make`` adds it to dict observations as ``obs["instruction"]``, a numpy
    unicode array ``[N]`` (sim_envs/instructions.py), for policies that read language; ``ood_instruction``: a
    paraphrase never trained on, used instead under ``ood_split='semantic'``.

    Training a task you register yourself starts from the schema defaults (``embodied_rl/config/schema.py``),
    then your ``--config`` file and ``key=value`` overrides: only built-in tasks (``builtin=True``, the ones in
    ``sim_envs/``) have recipes, and each must have one (``embodied_rl/configs/<name>.yaml``).
    """

    def decorate(factory):
        if name in _TASKS:
            raise ValueError(f"task {name!r} is already registered")
        _TASKS[name] = TaskEntry(name, factory, description, simulator, env_id, builtin, instruction,
                                  ood_instruction)
        return factory

    return decorate


def list_task_prefixes() -> list[str]:
    """The name prefixes that resolve tasks on first use (``gym:``)."""
    return sorted(_RESOLVERS)


def list_tasks() -> list[str]:
    return sorted(_TASKS)


def get_task(name: str) -> TaskEntry:
    if name not in _TASKS:
        prefix = next((p for p in _RESOLVERS if isinstance(name, str) and name.startswith(p)), None)
        if prefix is None:
            prefixes = "".join(f", or {p}<id>" for p in sorted(_RESOLVERS))
            raise TaskConfigError(f"unknown task {name!r}; available tasks: {', '.join(list_tasks())}{prefixes}")
        _TASKS[name] = _RESOLVERS[prefix](name)
    return _TASKS[name]


def make(task: str | TaskEntry, num_envs: int = 1, **overrides) -> VectorEnv:
    """Build the vector env of ``task`` (a registered name, or a ``TaskEntry`` from ``get_task``, which need not
    be registered in this process) with ``num_envs`` envs.

    Where the task has an instruction (or ``instruction=`` is passed, replacing it), its dict observations carry
    ``obs["instruction"]`` (``InstructedEnv``).
    """
    if not isinstance(num_envs, int) or num_envs < 1:
        raise TaskConfigError(f"num_envs must be a positive integer, got {num_envs!r}")
    entry = task if isinstance(task, TaskEntry) else get_task(task)
    held_out = overrides.get("ood_split") == "semantic" and entry.ood_instruction
    instruction = overrides.pop("instruction", entry.ood_instruction if held_out else entry.instruction)
    env = entry.factory(num_envs, **overrides)
    return env if instruction is None else InstructedEnv(env, instruction)
