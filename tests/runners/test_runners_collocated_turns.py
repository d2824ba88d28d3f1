"""Sampling and training take turns on shared device slots: a short real PPO run records its turns in order,
never overlapping, with the idle side offloaded; disjoint placements hold their own slots and offload nothing."""

import json

import pytest

from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.config.schema import validate
from embodied_rl.runners.embodied import EmbodiedRunner

TINY = ["env.num_workers=1", "env.envs_per_worker=2", "env.max_episode_steps=8", "rollout.steps_per_iteration=8",
        "total_env_steps=48", "eval.every_iterations=2", "eval.num_episodes=2", "checkpoint.every_iterations=0",
        "policy.hidden_sizes=[16]", "algorithm.num_minibatches=2", "algorithm.update_epochs=1"]


def _run(tmp_path, components: dict):
    config = load_train_config("maniskill_pushcube", None, TINY)
    config.placement.components = components
    validate(config)
    runner = EmbodiedRunner(config, tmp_path)
    runner.run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return runner.turns, rows


def test_collocated_run_takes_turns_in_order_and_offloads_the_idle_side(cluster, tmp_path):
    turns, rows = _run(tmp_path, {"env,rollout,actor": "0-1"})
    # 3 iterations of 16 steps; evaluations after iterations 2 and 3; the final checkpoint in the actor's turn.
    # The first evaluation is always the best so far (its checkpoint is kept); a later one only if it improves.
    holders = [t.holder for t in turns]
    assert holders[holders.index("evaluate") + 1] == "best_checkpoint"
    assert [h for h in holders if h != "best_checkpoint"] == ["start", "setup", "sample", "update", "sample",
                                                              "update", "evaluate", "sample", "update", "evaluate",
                                                              "checkpoint"]
    assert all(t.slots == (0, 1) for t in turns)
    for earlier, later in zip(turns, turns[1:]):
        assert earlier.released_at <= later.acquired_at, f"{earlier} overlaps {later}"
    assert len(rows) == 3 and all(r["train/policy_staleness"] == 0 for r in rows)
    for row in rows:
        assert row["time/onload_s"] > 0 and row["time/offload_s"] > 0 and row["time/turn_lock_s"] > 0
        assert row["time/sync_install_s"] > 0 and "time/sync_broadcast_s" not in row  # host memory between turns
    switch_ms = [1000 * r["time/turn_switch_s"] for r in rows]
    print(f"turn switch cost per iteration (2 switches, lock + onload/offload + weight sync): "
          f"{', '.join(f'{ms:.1f}' for ms in switch_ms)} ms")


def test_disjoint_phases_hold_their_own_slots_for_the_whole_run_and_offload_nothing(cluster, tmp_path):
    turns, rows = _run(tmp_path, {"env,rollout": "0", "actor": "1"})
    assert [(t.holder, t.slots) for t in turns] == [("sample", (0,)), ("update", (1,))]
    sample, update = turns
    assert sample.acquired_at < update.released_at and update.acquired_at < sample.released_at  # at once
    assert not any(key in row for row in rows for key in ("time/onload_s", "time/offload_s", "time/turn_lock_s"))
    assert all(r["train/policy_staleness"] == 0 for r in rows)
    assert all(r["time/sync_broadcast_s"] > 0 and "time/sync_install_s" not in r for r in rows)  # both live


def test_offload_setting_is_validated_in_one_line():
    with pytest.raises(ConfigError, match=r"^placement.offload='sometimes' is out of range; allowed: auto, never$"):
        load_train_config("maniskill_pushcube", None, ["placement.offload=sometimes"])
