"""Placement of a text run's workers: the embodied placement keys over env, rollout (generation) and actor
(trainer); processes pinned to their slots; shared slots take turns with offload, and refuse async rollout."""

import json
import threading

import psutil
import pytest
from tests_helpers import act_during_run, ray_worker_pids

from embodied_rl.config import ConfigError
from embodied_rl.config.reasoning import load_reasoning_config, takes_turns, text_placement, weight_sync

SMALL = ["env.count=200", "env.heldout_count=20", "sft.steps=0", "rl.iterations=4", "rl.prompts_per_iteration=4",
         "algorithm.group_size=4", "eval.every_iterations=0", "eval.num_problems=8", "rollout.max_new_tokens=4",
         "torch_threads=1", "checkpoint.every_iterations=0"]
SPLIT = "placement.components={'env,rollout': '0', 'actor': '1'}"
SHARED = "placement.components={'env,rollout,actor': '0-1'}"


def test_text_placements_resolve_like_embodied_ones():
    plain = load_reasoning_config("math_arith", None, [])
    assert text_placement(plain)[0] is None and not takes_turns(plain) and weight_sync(plain) == "broadcast"
    split = load_reasoning_config("math_arith", None, [SPLIT, "rollout.max_staleness=1"])
    placement = text_placement(split)[0]  # env and generation share core 0: hybrid, as Placement derives it
    assert placement.slots == {"env": (0,), "rollout": (0,), "actor": (1,)} and placement.mode.value == "hybrid"
    assert not takes_turns(split) and weight_sync(split) == "broadcast"
    shared = load_reasoning_config("math_arith", None, [SHARED])
    assert takes_turns(shared) and weight_sync(shared) == "object_store"  # weights wait in host memory
    with pytest.raises(ConfigError, match="rollout.max_staleness=1 .*slots of their own"):
        load_reasoning_config("math_arith", None, [SHARED, "rollout.max_staleness=1"])
    with pytest.raises(ConfigError, match="placement.trainer: unknown component; allowed: env, rollout, actor"):
        load_reasoning_config("math_arith", None, ["placement.components={'env,rollout': '0', 'trainer': '1'}"])
    assert load_reasoning_config("math_arith", None, ["placement.nodes={'actor': '0'}"]).placement.nodes == {
        "actor": "0"}  # trained on the node placed (tests/runners/test_runners_multi_node.py)
    with pytest.raises(ConfigError, match="placement.nodes.trainer='0' is out of range; allowed: components env"):
        load_reasoning_config("math_arith", None, ["placement.nodes={'trainer': '0'}"])
    with pytest.raises(ConfigError, match="placement.nodes.actor='last' is out of range; allowed: node indices"):
        load_reasoning_config("math_arith", None, ["placement.nodes={'actor': 'last'}"])


@pytest.mark.slow
def test_split_pins_generation_and_trainer_to_their_cores_and_shared_slots_take_turns(tmp_path, cluster):
    from embodied_rl.runners.reasoning import ReasoningRunner

    seen: dict = {}

    def look(_):
        for name in ("GenerationWorker", "LMActorWorker"):
            seen[name] = [psutil.Process(pid).cpu_affinity() for pid in ray_worker_pids(name)]

    config = load_reasoning_config("math_arith", None, [*SMALL, SPLIT])
    watcher = threading.Thread(target=act_during_run, daemon=True, args=(tmp_path / "split", [(2, None)], look))
    watcher.start()
    ReasoningRunner(config, tmp_path / "split").run()
    watcher.join(timeout=5)
    assert seen == {"GenerationWorker": [[0]], "LMActorWorker": [[1]]}

    shared = ReasoningRunner(load_reasoning_config("math_arith", None, [*SMALL, SHARED]), tmp_path / "shared")
    shared.run()
    # the turns were taken on the device lock, as embodied phases take theirs: first every slot to offload both
    # sides, then generation and training alternating on slots 0-1, one holder at a time
    holders = [turn.holder for turn in shared.turns]
    assert holders[0] == "start" and set(holders[1:]) == {"generation", "training"}
    assert all(a != b for a, b in zip(holders[1:], holders[2:])) and holders.count("training") >= 4
    assert all(turn.slots == (0, 1) for turn in shared.turns)
    spans = sorted((turn.acquired_at, turn.released_at) for turn in shared.turns)
    assert all(end is not None and end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))
    rows = [json.loads(line) for line in (tmp_path / "shared" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "time/iteration_s" in r]
    assert len(trained) == 4 and all(r["time/turn_switch_s"] > 0 for r in trained)  # two switches each
    assert all(r["train/policy_staleness"] == 0 for r in trained)  # object-store weights reached the generator
