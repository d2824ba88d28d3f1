"""A reasoning run survives SIGKILL of a generation worker, sent from outside as an operator would, and grows its
generation (rollout) workers live through ``embodied-rl scale``: the worker is replaced with the trainer's weights,
its part of the batch generated again, no response lost or received twice, and every iteration trains."""

import json
import os
import signal
import threading

import pytest
from tests_helpers import act_during_run, ray_worker_pids

from embodied_rl.runners.scale_requests import request_scale

ITERATIONS = 8
SMALL = ["env.count=200", "env.heldout_count=20", "sft.steps=0", f"rl.iterations={ITERATIONS}",
         "rl.prompts_per_iteration=4", "algorithm.group_size=4", "eval.every_iterations=0", "eval.num_problems=8",
         "rollout.max_new_tokens=4", "rollout.num_workers=2", "torch_threads=1", "checkpoint.every_iterations=0"]


@pytest.mark.slow
@pytest.mark.parametrize("weight_sync", ["broadcast", pytest.param("object_store", marks=pytest.mark.heavy)])  # CI time
def test_a_reasoning_run_survives_a_killed_generation_worker_and_scales_live(tmp_path, cluster, weight_sync):
    from embodied_rl.config.reasoning import load_reasoning_config
    from embodied_rl.runners.reasoning import ReasoningRunner

    config = load_reasoning_config("math_arith", None, [*SMALL, f"rollout.weight_sync={weight_sync}"])
    killed: list = []

    def act(what):
        if what == "kill":
            pids = ray_worker_pids("GenerationWorker")
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])
        else:
            request_scale(tmp_path, rollout=3)

    runner = ReasoningRunner(config, tmp_path)
    actor = threading.Thread(target=act_during_run, daemon=True, args=(tmp_path, [(3, "kill"), (5, "scale")], act))
    actor.start()
    runner.run()
    actor.join(timeout=5)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "time/iteration_s" in r]
    assert [r["train/iteration"] for r in trained] == list(range(1, ITERATIONS + 1))
    last = trained[-1]
    # A kill between syncs costs one replacement. Under broadcast a kill during a sync also leaves the other
    # worker stuck in the broken collective, and that one is replaced too: never more than the two workers.
    most = 2 if weight_sync == "broadcast" else 1
    assert killed and 1 <= last["fault/rollout_workers_replaced"] <= most
    assert last["fault/responses_duplicated"] == 0 and last["fault/responses_lost"] == 0
    assert [r["scale/rollout_workers"] for r in trained if "scale/rollout_workers" in r] == [3]
    assert runner.responses == ITERATIONS * 4 * 4  # every response of every batch, once
    assert all(r["train/policy_staleness"] == 0 for r in trained)  # replacements and new workers got the weights


def test_a_round_counts_responses_lost_and_duplicated_per_prompt(cluster):
    """The counters read each prompt's slot: a worker answering more than its part counts as duplicated, one
    answering fewer leaves prompts without a response (counted lost, and the round fails)."""
    import numpy as np
    import ray

    from embodied_rl.config.reasoning import load_reasoning_config
    from embodied_rl.runners.text_workers import GenerationRound, TextWorkers

    workers = TextWorkers(load_reasoning_config("math_arith", None, []), None, None, None)
    parts = [np.array([0, 1]), np.array([2])]
    extra = GenerationRound(["q0", "q1", "q2"], parts, [{}, {}], "generate",
                            [ray.put([{"i": 0}, {"i": 1}, {"i": 9}]), ray.put([{"i": 2}])])
    assert [a["i"] for a in workers.finish_generation(extra)] == [0, 1, 2]
    assert workers.faults["fault/responses_duplicated"] == 1 and workers.faults["fault/responses_lost"] == 0
    short = GenerationRound(["q0", "q1", "q2"], parts, [{}, {}], "generate",
                            [ray.put([{"i": 0}]), ray.put([{"i": 2}])])
    with pytest.raises(RuntimeError, match="without 1 of its 3 responses"):
        workers.finish_generation(short)
    assert workers.faults["fault/responses_lost"] == 1


@pytest.mark.slow
def test_a_sigkilled_text_env_worker_is_replaced_and_the_run_is_unchanged(tmp_path, cluster):
    """SIGKILL of the text env worker mid-run: it is replaced, restored to its last known prompt sampler state, and
    the call it missed is asked again; the run ends with the uninterrupted run's final weights, bit for bit."""
    import torch
    from safetensors.torch import load_file

    from embodied_rl.config.reasoning import load_reasoning_config
    from embodied_rl.runners.reasoning import ReasoningRunner

    # SFT (whose AdamW moments carry into RL) and a KL term: the weights move, and how depends on the prompts drawn
    overrides = [*SMALL, "rollout.num_workers=1", "sft.steps=3", "sft.batch_size=4", "algorithm.kl_coef=0.1",
                 "rl.lr=1e-3"]
    whole = tmp_path / "whole"
    ReasoningRunner(load_reasoning_config("math_arith", None, overrides), whole).run()

    killed = tmp_path / "killed"
    killed.mkdir()

    def act(_):
        os.kill(ray_worker_pids("TextEnvWorker")[0], signal.SIGKILL)

    runner = ReasoningRunner(load_reasoning_config("math_arith", None, overrides), killed)
    actor = threading.Thread(target=act_during_run, daemon=True, args=(killed, [(3, "kill")], act))
    actor.start()
    runner.run()
    actor.join(timeout=5)
    rows = [json.loads(line) for line in (killed / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "time/iteration_s" in r]
    assert [r["train/iteration"] for r in trained] == list(range(1, ITERATIONS + 1))
    assert trained[-1]["fault/env_workers_replaced"] >= 1

    def same_keys(run_dir) -> list[dict]:  # what the run measured, less timings and fault counters
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "fault/"))} for r in rows]

    assert same_keys(killed) == same_keys(whole)
    expected, got = (load_file(str(d / "model" / "model.safetensors")) for d in (whole, killed))
    assert all(torch.equal(got[name], expected[name]) for name in expected)
    assert any(r.get("train/grad_norm", 0) > 0 for r in trained)  # the weights did move
