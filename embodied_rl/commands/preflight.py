"""Checks that run before anything is written: the task's simulator can start with these options."""

from __future__ import annotations

from embodied_rl.config.errors import ConfigError
from embodied_rl.config.schema import TrainConfig


def check_task_starts(config: TrainConfig) -> None:
    """Build and close one env in this process, from the task's registry entry as the env workers receive it
    (pickled and unpickled); any user-fixable failure becomes a one-line ConfigError."""
    import sim_envs
    from ray import cloudpickle
    from embodied_rl.runners.setup import env_options

    try:
        entry = sim_envs.get_task(config.task)
    except sim_envs.TaskConfigError as error:
        raise ConfigError(str(error)) from None
    try:
        entry = cloudpickle.loads(cloudpickle.dumps(entry))
    except Exception as error:  # a factory closing over a lock, an open file, a live env, ...
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"task {config.task!r} cannot be sent to the env workers: its factory "
                          f"{getattr(entry.factory, '__qualname__', entry.factory)!r} does not pickle ({detail}); "
                          "build unpicklable objects inside the factory, not around it") from None
    try:
        env = sim_envs.make(entry, 1, processes=False, **env_options(config))
    except sim_envs.TaskConfigError as error:
        raise ConfigError(str(error)) from None
    except (AssertionError, KeyError, ValueError, NotImplementedError) as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"task {config.task!r} cannot start with env options "
                          f"control_mode={config.env.control_mode!r}, obs_mode={config.env.obs_mode!r}: "
                          f"{detail}") from None
    try:
        from embodied_rl.runners.demonstrations import check_demonstrations

        check_demonstrations(config, env)  # a LeRobot dataset that does not fit the task: refused before Ray starts
    finally:
        env.close()
