"""robosuite (1.5.2) single-arm manipulation tasks in the registry, as ``robosuite_<task>`` (``Lift`` ->
``robosuite_lift``, ``NutAssemblySquare`` -> ``robosuite_nut_assembly_square``), the Panda arm by default.

These are built-in tasks (``builtin=True``): each has a recipe ``embodied_rl/configs/<task>.yaml``, which extends the
family's shared recipe ``embodied_rl/configs/robosuite.yaml``. Each states its instruction in words (camera
observations carry it as ``obs["instruction"]``). robosuite's two-arm tasks and its random single-object variants
(``PickPlaceSingle``, ``NutAssemblySingle``) are not registered.
"""

from __future__ import annotations

import re
from functools import partial

from sim_envs.families import SimulatorFamily, register_family
from sim_envs.registry import register_task

FAMILY = "robosuite"

register_family(SimulatorFamily(
    FAMILY, demos="sim_envs.robosuite.demos",
    reference_vector_envs={"async_vector_env": "sim_envs.robosuite.reference:async_vector_env",
                           "sync_vector_env": "sim_envs.robosuite.reference:sync_vector_env"}))

INSTRUCTIONS = {
    "Lift": "lift the red cube",
    "Stack": "stack the red cube on the green cube",
    "PickPlace": "put each object into its bin",
    "PickPlaceMilk": "put the milk carton into its bin",
    "PickPlaceBread": "put the bread into its bin",
    "PickPlaceCereal": "put the cereal box into its bin",
    "PickPlaceCan": "put the can into its bin",
    "NutAssembly": "fit the square nut and the round nut onto their pegs",
    "NutAssemblySquare": "fit the square nut onto the square peg",
    "NutAssemblyRound": "fit the round nut onto the round peg",
    "Door": "open the door",
    "Wipe": "wipe the markings off the table",
    "ToolHang": "insert the frame into the stand and hang the tool on it",
}
"""robosuite env name -> the task in words."""


def task_name(env_id: str) -> str:
    """``NutAssemblySquare`` -> ``robosuite_nut_assembly_square``."""
    return f"{FAMILY}_{re.sub(r'(?<!^)(?=[A-Z])', '_', env_id).lower()}"


def make_robosuite(env_id: str, num_envs: int, **overrides):
    """The vector env of robosuite's ``env_id`` with ``num_envs`` envs in this process."""
    from sim_envs.robosuite.envs import RobosuiteEnvs
    from sim_envs.robosuite.options import RobosuiteOptions

    return RobosuiteEnvs(env_id, num_envs, RobosuiteOptions.parse(overrides))


def _register_all() -> None:
    for env_id, instruction in INSTRUCTIONS.items():
        register_task(task_name(env_id), f"robosuite {env_id} (Panda arm by default): {instruction}", FAMILY, env_id,
                      builtin=True, instruction=instruction)(partial(make_robosuite, env_id))


_register_all()
