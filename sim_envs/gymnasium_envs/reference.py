"""Gymnasium's own vector env of a ``gym:<id>`` task, the bare loop ``embodied-rl bench env`` measures against."""

from __future__ import annotations


def sync_vector_env(env_id: str, num_envs: int, options: dict):
    """``gymnasium.vector.SyncVectorEnv`` of ``num_envs`` copies of ``env_id`` (with ``options['kwargs']``)."""
    import gymnasium

    kwargs = dict(options.get("kwargs") or {})
    return gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make(env_id, disable_env_checker=True, **kwargs)
                                           for _ in range(num_envs)])
