"""``policy.name=auto``: the task's default policy for the chosen algorithm, and the check that a policy's actions
fit the task's (a categorical policy for discrete actions, a Gaussian one for continuous actions)."""

from __future__ import annotations

from embodied_rl.config.errors import ConfigError

AUTO = "auto"


def _discrete_actions(task: str | None) -> int:
    import sim_envs

    if not task:
        return 0
    try:
        return sim_envs.get_task(task).discrete_actions
    except sim_envs.TaskConfigError as error:
        raise ConfigError(str(error)) from None


def choose_policy(config) -> None:
    """Replace ``policy.name=auto`` (in place) by ``mlp_categorical`` for a task with discrete actions, ``mlp_sac``
    for an off-policy learner, ``mlp`` otherwise; then refuse a policy whose actions do not fit the task's."""
    from embodied_rl.algorithms.embodied import algorithm_needs
    from embodied_rl.models import POLICIES

    discrete = _discrete_actions(config.task)
    replay = algorithm_needs(config.algorithm).replay
    if discrete and replay:
        raise ConfigError(f"algorithm.name={config.algorithm.name!r} needs continuous actions, and task "
                          f"{config.task!r} takes one of {discrete} discrete actions; allowed: an on-policy "
                          "algorithm (ppo, grpo, ...)")
    if config.policy.name == AUTO:
        config.policy.name = "mlp_categorical" if discrete else "mlp_sac" if replay else "mlp"
    if config.policy.name not in POLICIES.names():
        return  # the schema's check names the registered policies
    takes_discrete = bool(getattr(POLICIES.get(config.policy.name), "discrete_actions", False))
    if takes_discrete != bool(discrete):
        wanted = "a categorical policy (mlp_categorical)" if discrete else "a policy of continuous actions"
        raise ConfigError(f"policy.name={config.policy.name!r} does not fit task {config.task!r}, whose actions are "
                          f"{'discrete' if discrete else 'continuous'}; allowed: {wanted} or auto")
