"""MetaWorld (v3) tasks in the registry: all 50 of MT50, as ``metaworld_<task>`` (``reach-v3`` ->
``metaworld_reach``, ``pick-place-v3`` -> ``metaworld_pick_place``).

These are built-in tasks (``builtin=True``): each has a recipe ``embodied_rl/configs/<task>.yaml``, which extends
the family's shared recipe ``embodied_rl/configs/metaworld.yaml``. Each states its instruction in words (camera
observations carry it as ``obs["instruction"]``). The 10 tasks of MetaWorld's MT10 are listed in ``MT10``.
"""

from __future__ import annotations

from functools import partial

from sim_envs.families import SimulatorFamily, register_family
from sim_envs.registry import register_task

FAMILY = "metaworld"

register_family(SimulatorFamily(
    FAMILY, demos="sim_envs.metaworld.demos",
    reference_vector_envs={"async_vector_env": "sim_envs.metaworld.reference:async_vector_env",
                           "sync_vector_env": "sim_envs.metaworld.reference:sync_vector_env"}))

INSTRUCTIONS = {
    "assembly-v3": "put the ring onto the peg",
    "basketball-v3": "dunk the ball into the basket",
    "bin-picking-v3": "move the puck from one bin to the other",
    "box-close-v3": "put the lid on the box",
    "button-press-topdown-v3": "press the button from the top",
    "button-press-topdown-wall-v3": "press the button behind the wall from the top",
    "button-press-v3": "press the button",
    "button-press-wall-v3": "press the button behind the wall",
    "coffee-button-v3": "press the button of the coffee machine",
    "coffee-pull-v3": "pull the mug away from the coffee machine",
    "coffee-push-v3": "push the mug under the coffee machine",
    "dial-turn-v3": "turn the dial",
    "disassemble-v3": "pick the ring off the peg",
    "door-close-v3": "close the door",
    "door-lock-v3": "lock the door by turning the lock",
    "door-open-v3": "open the door",
    "door-unlock-v3": "unlock the door by turning the lock",
    "hand-insert-v3": "put the hand into the hole",
    "drawer-close-v3": "close the drawer",
    "drawer-open-v3": "open the drawer",
    "faucet-open-v3": "turn the faucet on",
    "faucet-close-v3": "turn the faucet off",
    "hammer-v3": "hammer the nail into the wall",
    "handle-press-side-v3": "press the handle down from the side",
    "handle-press-v3": "press the handle down",
    "handle-pull-side-v3": "pull the handle up from the side",
    "handle-pull-v3": "pull the handle up",
    "lever-pull-v3": "pull the lever up",
    "pick-place-wall-v3": "pick up the puck and place it at the goal behind the wall",
    "pick-out-of-hole-v3": "pick the peg out of the hole",
    "pick-place-v3": "pick up the puck and place it at the goal",
    "plate-slide-v3": "slide the plate into the cabinet",
    "plate-slide-side-v3": "slide the plate into the cabinet from the side",
    "plate-slide-back-v3": "slide the plate out of the cabinet",
    "plate-slide-back-side-v3": "slide the plate out of the cabinet to the side",
    "peg-insert-side-v3": "insert the peg into the hole from the side",
    "peg-unplug-side-v3": "unplug the peg to the side",
    "soccer-v3": "kick the ball into the goal",
    "stick-push-v3": "grasp the stick and push the box with it",
    "stick-pull-v3": "grasp the stick and pull the box with it",
    "push-v3": "push the puck to the goal",
    "push-wall-v3": "push the puck around the wall to the goal",
    "push-back-v3": "push the puck back to the goal",
    "reach-v3": "reach the goal position",
    "reach-wall-v3": "reach the goal position behind the wall",
    "shelf-place-v3": "pick up the puck and place it on the shelf",
    "sweep-into-v3": "sweep the puck into the hole",
    "sweep-v3": "sweep the puck off the table",
    "window-open-v3": "slide the window open",
    "window-close-v3": "slide the window closed",
}
"""MetaWorld env id -> the task in words (every one of MT50)."""

MT10 = ("reach-v3", "push-v3", "pick-place-v3", "door-open-v3", "drawer-open-v3", "drawer-close-v3",
        "button-press-topdown-v3", "peg-insert-side-v3", "window-open-v3", "window-close-v3")


def task_name(env_id: str) -> str:
    """``pick-place-v3`` -> ``metaworld_pick_place``."""
    return f"{FAMILY}_{env_id.removesuffix('-v3').replace('-', '_')}"


def make_metaworld(env_id: str, num_envs: int, **overrides):
    """The vector env of MetaWorld's ``env_id`` with ``num_envs`` envs in this process."""
    from sim_envs.metaworld.options import MetaWorldOptions

    options = MetaWorldOptions.parse(overrides)
    try:
        import metaworld  # noqa: F401
    except ImportError as error:
        from sim_envs.errors import SimulatorUnavailableError

        raise SimulatorUnavailableError(f"MetaWorld is not installed ({error}); install it with "
                                        "`pip install metaworld==3.1.1`") from None
    from sim_envs.metaworld.envs import MetaWorldEnvs

    return MetaWorldEnvs(env_id, num_envs, options)


def _register_all() -> None:
    for env_id, instruction in INSTRUCTIONS.items():
        register_task(task_name(env_id), f"MetaWorld {env_id} (Sawyer): {instruction}", FAMILY, env_id,
                      builtin=True, instruction=instruction)(partial(make_metaworld, env_id))


_register_all()
