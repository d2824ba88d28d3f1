"""``policy.name=auto`` and the gym family recipes: the policy follows the task's action space and the algorithm,
and a policy or learner that does not fit the actions is refused in one line."""

import pytest

from embodied_rl.config import ConfigError, load_train_config


def test_auto_picks_a_categorical_policy_for_discrete_actions_and_the_ppo_recipe():
    config = load_train_config("gym:CartPole-v1")
    assert (config.policy.name, config.algorithm.name) == ("mlp_categorical", "ppo")
    assert config.algorithm.bootstrap_on_termination is False and config.eval.score == "episode_return"
    assert config.rollout.inline and config.policy.hidden_sizes == [64, 64]


def test_sac_on_a_continuous_gym_task_reads_the_sac_recipe_and_its_policy():
    config = load_train_config("gym:Pendulum-v1", overrides=["algorithm.name=sac"])
    assert config.policy.name == "mlp_sac"
    assert (config.algorithm.gamma, config.algorithm.learning_starts, config.algorithm.bootstrap_at) == \
        (0.99, 5000, "truncation")
    assert load_train_config("gym:Pendulum-v1").policy.name == "mlp"


def test_env_kwargs_reach_the_env_options():
    from embodied_rl.runners.setup import env_options

    config = load_train_config("gym:Pendulum-v1", overrides=["env.kwargs.g=3.5"])
    assert env_options(config)["kwargs"] == {"g": 3.5}
    assert "kwargs" not in env_options(load_train_config("gym:Pendulum-v1"))


@pytest.mark.parametrize("task, overrides, fragment", [
    ("gym:CartPole-v1", ["algorithm.name=sac"], "needs continuous actions"),
    ("gym:CartPole-v1", ["policy.name=mlp"], "policy.name='mlp' does not fit task 'gym:CartPole-v1'"),
    ("gym:Pendulum-v1", ["policy.name=mlp_categorical"], "whose actions are continuous"),
    ("gym:Pendulum-v1", ["eval.score=reward"], "eval.score"),
    ("gym:NoSuchEnv-v9", [], "Gymnasium has no env"),
])
def test_what_does_not_fit_is_one_line(task, overrides, fragment):
    with pytest.raises(ConfigError) as error:
        load_train_config(task, overrides=overrides)
    assert fragment in str(error.value) and "\n" not in str(error.value)
