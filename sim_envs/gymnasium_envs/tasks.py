"""``gym:<id>`` tasks: any env registered with Gymnasium, resolved on first use (``sim_envs.get_task``).

Such a task is not built in: it has no recipe of its own and starts from the family recipe ``gym`` (or
``gym_<algorithm>`` where one exists: ``embodied_rl/configs/gym_ppo.yaml``, ``gym_sac.yaml``). Its entry records
whether its actions are discrete, so ``policy.name=auto`` can pick a categorical policy.
"""

from __future__ import annotations

from functools import partial

from sim_envs.errors import TaskConfigError
from sim_envs.families import SimulatorFamily, register_family
from sim_envs.registry import TaskEntry, register_task_prefix

FAMILY = "gymnasium"
PREFIX = "gym:"

register_family(SimulatorFamily(FAMILY, reference_vector_envs={
    "sync_vector_env": "sim_envs.gymnasium_envs.reference:sync_vector_env"}))


def make_gymnasium(env_id: str, num_envs: int, **overrides):
    """The vector env of ``num_envs`` Gymnasium envs of ``env_id`` in this process."""
    from sim_envs.gymnasium_envs.envs import GymnasiumEnvs
    from sim_envs.gymnasium_envs.options import GymnasiumOptions

    return GymnasiumEnvs(env_id, num_envs, GymnasiumOptions.parse(overrides))


def resolve(name: str) -> TaskEntry:
    """The entry of ``gym:<id>``; a one-line TaskConfigError for an id Gymnasium does not know or spaces the
    runtime cannot take."""
    import gymnasium

    env_id = name[len(PREFIX):]
    try:
        spec = gymnasium.spec(env_id)
    except gymnasium.error.Error as error:
        raise TaskConfigError(f"task {name!r}: Gymnasium has no env {env_id!r} ({str(error).splitlines()[0]})") \
            from None
    from sim_envs.gymnasium_envs.spaces import ActionSpace, ObservationSpace

    try:
        env = gymnasium.make(env_id, disable_env_checker=True)
    except Exception as error:  # a registered env whose simulator is missing (MuJoCo, Box2D, Atari)
        raise TaskConfigError(f"task {name!r} cannot be built: {type(error).__name__}: "
                              f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}") from None
    try:
        ObservationSpace(env.observation_space, env_id)
        actions = ActionSpace(env.action_space, env_id)
    finally:
        env.close()
    return TaskEntry(name, partial(make_gymnasium, env_id), f"Gymnasium {env_id} ({spec.entry_point})", FAMILY,
                     env_id, recipe="gym", discrete_actions=actions.n if actions.discrete else 0)


register_task_prefix(PREFIX, resolve)
