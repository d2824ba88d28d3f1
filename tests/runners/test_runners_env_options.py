"""What the runner asks of the envs: terminations ignored for GRPO's lock-step groups and on request."""

from embodied_rl.config import load_train_config
from embodied_rl.runners.setup import env_options


def test_terminations_are_ignored_for_grouped_episodes_and_when_asked_only():
    ppo = load_train_config("maniskill_pushcube", None, [])
    assert "ignore_terminations" not in env_options(ppo)
    asked = load_train_config("maniskill_pushcube", None, ["env.ignore_terminations=true"])
    assert env_options(asked)["ignore_terminations"] is True
    grpo = load_train_config("maniskill_pushcube", None, ["algorithm.name=grpo", "algorithm.group_size=4",
                                                         "env.max_episode_steps=50"])
    assert env_options(grpo)["ignore_terminations"] is True
