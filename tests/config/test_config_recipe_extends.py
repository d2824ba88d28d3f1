"""A recipe may extend another (``extends: <name>``): the MetaWorld tasks share the family recipe."""

import pytest

from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.config import loader


def test_a_task_recipe_takes_the_family_recipe_under_its_own_keys():
    family = loader.read_recipe("metaworld")
    push = load_train_config("metaworld_hammer", None, [])
    assert push.env.control_mode == "ee_delta_pos" == family.env.control_mode  # from the family recipe
    assert push.total_env_steps == family.total_env_steps
    reach = loader.read_recipe("metaworld_reach")
    assert "extends" not in reach and reach.env.control_mode == "ee_delta_pos"
    assert reach.stages[1].env.max_episode_steps == 100  # the task's own stages replace the family's list


def test_a_missing_base_or_a_cycle_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "CONFIGS_DIR", tmp_path)
    (tmp_path / "a.yaml").write_text("extends: b\n")
    with pytest.raises(ConfigError, match="recipe 'b' extended by 'a' does not exist"):
        loader.read_recipe("a")
    (tmp_path / "b.yaml").write_text("extends: a\n")
    with pytest.raises(ConfigError, match="must name another recipe \\(no cycles\\)"):
        loader.read_recipe("a")
