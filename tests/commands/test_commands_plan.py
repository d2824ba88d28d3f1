"""``embodied-rl plan``: a run's memory per component and each placement's verdict, before anything starts; its
figures follow the config (micro-batches shrink the activations, a sharded actor plans per rank) and bad input is one line with exit code 2."""

import json

import pytest

from conftest import run_cli

from embodied_rl.cli import main

TINY_VLA = ["--task", "maniskill_pushcube", "--config", "configs/recipes/vla/pushcube_openvla_oft_tiny.yaml"]


@pytest.mark.slow
def test_plan_of_a_staged_vla_recipe_reports_each_stage_and_micro_batches_shrink_activations(capsys):
    def plan(*overrides) -> list[dict]:  # in this process: the three plans read the task's (camera) env once
        assert main(["plan", *TINY_VLA, "--json", *overrides]) == 0
        return json.loads(capsys.readouterr().out)

    from embodied_rl.commands.plan import _SHAPES

    _SHAPES.clear()  # what other tests of this process read
    plans = plan()
    assert len(_SHAPES) == 1  # the SFT and GRPO stages differ in episode options only: the camera env built once
    assert [p["algorithm"] for p in plans] == ["sft", "grpo"]
    rl = plans[1]
    actor, rollout = rl["components"]["actor"], rl["components"]["rollout"]
    assert actor["weights"] == rollout["weights"] > 0 and actor["gradients"] > 0 and actor["optimizer"] == \
        2 * actor["gradients"]  # Adam's two float32 moments of the trained weights
    assert rl["placements"]["collocated"]["fits"]
    small = plan("actor.micro_batch_size=2")[1]
    assert small["update_rows"] == 2 < rl["update_rows"]
    assert small["components"]["actor"]["activations"] < actor["activations"]
    sharded = plan("actor.backend=fsdp", "actor.world_size=2")[1]
    part = sharded["components"]["actor"]
    assert sharded["update_rows"] == rl["update_rows"] // 2  # each rank computes its slice of a minibatch
    assert part["optimizer"] == actor["optimizer"] / 2 and part["gradients"] == actor["gradients"] / 2
    assert actor["weights"] / 2 < part["weights"] < actor["weights"]  # a shard, plus what FSDP gathers whole
    assert sharded["placements"]["collocated"]["gpus"] == 2
    rollout_gib = sum(sharded["components"]["rollout"].values()) / 2 ** 30
    # a sharded actor is not offloaded: a collocated GPU holds it beside the rollout worker
    assert sharded["placements"]["collocated"]["peak_gib"] == pytest.approx(sum(part.values()) / 2 ** 30 + rollout_gib)


@pytest.mark.slow
def test_plan_of_updates_accumulated_over_rounds_counts_their_rows(capsys):
    """groups_per_update=16 with 4 groups a round: an update holds 4 rounds, so a minibatch 4 times the rows."""
    recipe = ["--task", "maniskill_pushcube", "--config", "configs/recipes/vla/pushcube_pi0_tiny_rlinf.yaml"]

    def rows(groups: int) -> int:
        assert main(["plan", *recipe, "--json", f"stages.1.algorithm.groups_per_update={groups}"]) == 0
        return json.loads(capsys.readouterr().out)[1]["update_rows"]

    assert rows(16) == 4 * rows(4) > 0


def test_plan_of_a_text_task_sizes_trainer_and_generation():
    result = run_cli("plan", "--task", "math_arith", "--gpus", "2", "--gpu-memory", "24GB", "--prompt-tokens", "32")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "trainer rank:" in result.stdout and "generation:" in result.stdout
    assert "disaggregated: 2 GPU(s)" in result.stdout and "fits" in result.stdout


@pytest.mark.parametrize("args, key", [(["--gpu-memory", "lots"], "--gpu-memory"), (["--gpus", "0"], "--gpus"),
                                       (["policy.name=nope"], "policy.name")])
def test_bad_plan_input_is_one_line(args, key):
    result = run_cli("plan", "--task", "maniskill_pushcube", *args)
    assert result.returncode == 2 and key in result.stderr and "Traceback" not in result.stderr, result.stderr
