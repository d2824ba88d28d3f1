"""The ``fault`` section: deadlines with generous defaults, and one line naming a bad key."""

import pytest

from embodied_rl.config import ConfigError, load_train_config


def test_fault_deadlines_have_generous_defaults_and_take_overrides():
    fault = load_train_config("maniskill_pushcube", None, []).fault
    assert (fault.hang_timeout_s, fault.start_timeout_s, fault.update_timeout_s) == (300.0, 600.0, 3600.0)
    assert load_train_config("maniskill_pushcube", None, ["fault.hang_timeout_s=10"]).fault.hang_timeout_s == 10


@pytest.mark.parametrize("key", ["hang_timeout_s", "start_timeout_s", "update_timeout_s"])
def test_a_deadline_that_is_not_positive_is_refused_with_one_line(key):
    with pytest.raises(ConfigError, match=rf"^fault\.{key}=0\.0 is out of range; allowed: seconds > 0$"):
        load_train_config("maniskill_pushcube", None, [f"fault.{key}=0"])
