"""Simulator families: what the code above ``sim_envs`` may ask of a family beyond building its vector envs.

A family (``maniskill``, ``metaworld``, and next LIBERO or RoboTwin) is one folder ``sim_envs/<family>/`` that
registers its tasks (``register_task(..., simulator=<family>)``) and one ``SimulatorFamily`` here. Everything is
named by module path and imported on first use, so registering a family imports no simulator.

* ``demos``: a module with ``SOURCES`` (demonstration sources; the first is the default), ``DEFAULT_CONTROL_MODE``,
  ``plan_demos(entry, source, control_mode, policy) -> DemoPlan`` (validates, one-line ``TaskConfigError``) and
  ``open_demo_pipeline(plan, obs_mode, directory, stem, image_size, planner_speed, policy) -> DemoPipeline``
  (records episodes into ManiSkill's trajectory format; see ``DemoPipeline``). None: the family makes no demos.
* ``reference_vector_envs``: name -> ``"module:function"`` building Gymnasium's own vector env of one task,
  ``function(env_id, num_envs, options: dict) -> gymnasium.vector.VectorEnv``, for ``embodied-rl bench env`` to
  measure the runtime against.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Protocol

from sim_envs.errors import TaskConfigError


@dataclass(frozen=True)
class DemoPlan:
    """A validated demonstration request of one task: the env to record, the control mode the source acts in
    and the one the written actions are in."""

    env_id: str
    source: str
    source_control_mode: str
    control_mode: str


@dataclass
class EpisodeOutcome:
    """How one recorded episode ended."""

    seed: int
    success: bool
    """Success at the last recorded step (``episodes[i]['success']`` of the ``.json``)."""
    steps: int
    seconds: float


@dataclass
class DemoEpisode:
    """One source episode through a pipeline: how the source did, and what was written (None: nothing)."""

    source: EpisodeOutcome
    written: EpisodeOutcome | None
    replay_failed: bool = False
    """The source's episode was kept but its conversion into the wanted control or obs mode failed."""
    replay_seconds: float = 0.0


class DemoPipeline(Protocol):
    trajectory: str
    """The file name (``.h5``) the requested demonstrations go to, in the pipeline's directory."""
    source_trajectory: str
    """The file name of the source's own recording (the same file when nothing is converted)."""
    reward_mode: str

    def run_episode(self, seed: int, keep_failures: bool) -> DemoEpisode:
        """Record the source's episode from ``seed``; write it (converted if needed) when it succeeded or
        ``keep_failures``."""

    def close(self) -> None:
        """Finish the files."""


@dataclass(frozen=True)
class SimulatorFamily:
    name: str
    demos: str | None = None
    """Module path of the family's demonstrations (see the module docstring)."""
    reference_vector_envs: dict[str, str] = field(default_factory=dict)
    """Baseline name -> ``"module:function"`` (see the module docstring)."""

    def demos_module(self):
        if self.demos is None:
            raise TaskConfigError(f"{self.name} tasks have no demonstration sources")
        return importlib.import_module(self.demos)

    def reference_vector_env(self, name: str) -> Callable:
        module, function = self.reference_vector_envs[name].split(":")
        return getattr(importlib.import_module(module), function)


_FAMILIES: dict[str, SimulatorFamily] = {}


def register_family(family: SimulatorFamily) -> SimulatorFamily:
    if family.name in _FAMILIES:
        raise ValueError(f"simulator family {family.name!r} is already registered")
    _FAMILIES[family.name] = family
    return family


def get_family(name: str) -> SimulatorFamily:
    """The family of that name; a TaskConfigError naming the known ones otherwise."""
    if name not in _FAMILIES:
        raise TaskConfigError(f"simulator family {name!r} has no SimulatorFamily; known: {', '.join(sorted(_FAMILIES))}")
    return _FAMILIES[name]


def list_families() -> list[str]:
    return sorted(_FAMILIES)
