"""Checks that run before anything is written: the task's simulator can start with these options."""

from __future__ import annotations

from embodied_rl.config.errors import ConfigError
from embodied_rl.config.schema import TrainConfig


def check_task_starts(config: TrainConfig) -> None:
    """Build and close one env in this process; any user-fixable failure becomes a one-line ConfigError."""
    import sim_envs
    from embodied_rl.runners.setup import env_options

    try:
        env = sim_envs.make(config.task, 1, processes=False, **env_options(config))
    except sim_envs.TaskConfigError as error:
        raise ConfigError(str(error)) from None
    except (AssertionError, KeyError, ValueError, NotImplementedError) as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"task {config.task!r} cannot start with env options "
                          f"control_mode={config.env.control_mode!r}, obs_mode={config.env.obs_mode!r}: "
                          f"{detail}") from None
    env.close()
