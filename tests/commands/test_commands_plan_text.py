"""``embodied-rl plan`` for text tasks against memory measured on this CPU: every planned peak (the trainer rank
and the generation worker) within 25% of the peak torch's MemTracker sees for the ``tiny`` and ``small`` LMs, with
and without the memory features; a plan that ignored micro-batches would be far off (the check can fail)."""

import pytest

from embodied_rl.commands.plan_text import text_plan
from embodied_rl.commands.plan_text_measure import measured_generation_peak, measured_trainer_peak
from embodied_rl.config.reasoning import load_reasoning_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT_TOKENS = 96
BASE = ["rl.prompts_per_iteration=4", "algorithm.group_size=8", "rollout.max_new_tokens=64", "rl.num_minibatches=2"]


def planned(config) -> tuple[float, float]:
    parts = text_plan(config, PROMPT_TOKENS)["components"]
    return sum(parts["trainer rank"].values()), sum(parts["generation"].values())


FEATURES = ["actor.micro_batch_size=4", "actor.activation_checkpointing=true", "algorithm.kl_coef=0.01"]


# Two of scripts/plan_vs_measured.py's ten rows (CI time); the script prints them all.
@pytest.mark.parametrize("size, features", [("tiny", []), ("small", FEATURES)])
def test_planned_peaks_are_within_a_quarter_of_measured(size, features):
    config = load_reasoning_config("math_arith", None, [f"model.name={size}", *BASE, *features])
    trainer, generation = planned(config)
    measured_trainer = measured_trainer_peak(config, PROMPT_TOKENS)
    measured_generation = measured_generation_peak(config, PROMPT_TOKENS)
    assert 0.75 <= trainer / measured_trainer <= 1.25, (trainer, measured_trainer)
    assert 0.75 <= generation / measured_generation <= 1.25, (generation, measured_generation)
    if features:  # the same run planned as if its micro-batches were not there: outside the band
        whole = load_reasoning_config("math_arith", None, [f"model.name={size}", *BASE, *features,
                                                           "actor.micro_batch_size=null"])
        assert planned(whole)[0] / measured_trainer > 1.25


def test_megatron_ranks_hold_their_tensor_parallel_slice_and_their_copy_s_rows():
    """TP=2 x DP=2 over 4 ranks: each rank holds half the weights, optimizer state and reference of TP=1, and
    trains on half the minibatch rows; TP=4 holds a quarter and trains on every row."""
    pytest.importorskip("megatron.core", reason="megatron-core is not installed (the `megatron` extra)")
    base = [*BASE, "actor.backend=megatron", "algorithm.kl_coef=0.01"]
    plans = {tp: text_plan(load_reasoning_config("math_arith", None, [*base, f"actor.world_size={world}",
                                                                      f"actor.tensor_parallel_size={tp}"]))
             for tp, world in ((1, 1), (2, 4), (4, 4))}
    for part in ("weights", "optimizer", "reference"):
        one = plans[1]["components"]["trainer rank"][part]
        assert one > 0 and plans[2]["components"]["trainer rank"][part] == pytest.approx(one / 2), part
        assert plans[4]["components"]["trainer rank"][part] == pytest.approx(one / 4), part
    rows = {tp: plan["minibatch_rows_per_rank"] for tp, plan in plans.items()}
    assert rows == {1: 16, 2: 8, 4: 16}
