import pytest

from embodied_rl.runtime.placement import PlacementError, PlacementMode, build_placement, parse_slots


def test_slot_ranges_and_lists_parse():
    assert parse_slots("0-2", "env", 4) == (0, 1, 2)
    assert parse_slots("3,0", "env", 4) == (0, 3)
    assert parse_slots(1, "env", 4) == (1,)


@pytest.mark.parametrize("components, stages, mode", [
    ({"env": "0-1", "rollout": "0-1", "actor": "0-1"}, 1, PlacementMode.COLLOCATED),
    ({"env,rollout,actor": "0-1"}, 1, PlacementMode.COLLOCATED),
    ({"env": "0", "rollout": "1", "actor": "2-3"}, 1, PlacementMode.DISAGGREGATED),
    ({"env,rollout": "0-1", "actor": "2-3"}, 1, PlacementMode.HYBRID),
    ({"env": "0-1", "rollout": "0-1", "actor": "0-1"}, 2, PlacementMode.HYBRID),
])
def test_mode_is_derived_from_the_map(components, stages, mode):
    placement = build_placement(components, 4, stages)
    assert placement.mode is mode
    assert mode.value in placement.describe()


def test_shared_components_are_reported():
    placement = build_placement({"env,rollout": "0-1", "actor": "1-2"}, 4)
    assert placement.shared_with("actor") == ["env", "rollout"]
    assert placement.shared_with("env") == ["rollout", "actor"]


@pytest.mark.parametrize("components, message", [
    ({"env": "0-5", "rollout": "0", "actor": "0"},
     "placement.env='0-5': slot 5 is out of range; this cluster has slots 0-3"),
    ({"env": "", "rollout": "0", "actor": "0"}, "placement.env: no slots given"),
    ({"env": "a-b", "rollout": "0", "actor": "0"}, "is not a slot or a range"),
    ({"env": "2-1", "rollout": "0", "actor": "0"}, "empty or negative"),
    ({"env": "0", "rollout": "0"}, "no slots for actor"),
    ({"env": "0", "rollout": "0", "actor": "0", "critic": "1"}, "placement.critic: unknown component"),
    ({"env": "0", "env,rollout": "0", "actor": "0"}, "placement.env: placed twice"),
])
def test_bad_placements_raise_one_line(components, message):
    with pytest.raises(PlacementError) as error:
        build_placement(components, 4)
    assert message in str(error.value) and "\n" not in str(error.value)
