"""Reasoning runs sync trainer -> generation weights by collective broadcast (gloo here): after a publish every
generation worker holds exactly the trainer's weights, and its int8 copy samples as after the object-store path."""

import json

import numpy as np
import pytest
import ray

SMALL = ["env.count=50", "env.heldout_count=4", "sft.steps=2", "sft.batch_size=4", "rl.iterations=1",
         "rl.prompts_per_iteration=2", "algorithm.group_size=2", "eval.every_iterations=0", "eval.num_problems=2",
         "rollout.max_new_tokens=2", "rollout.num_workers=2", "rollout.quantization=int8", "torch_threads=1"]


def _assert_same(weights: dict, expected: dict) -> None:
    assert weights.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_array_equal(weights[name], value, err_msg=name)


def _greedy(worker) -> list[tuple]:
    answers = ray.get(worker.generate.remote(["12+7", "3-5"], dict(max_new_tokens=3, temperature=0.0, seed=0)))
    return [(a["token_ids"], a["logprobs"]) for a in answers]


def test_broadcast_gives_generation_workers_the_trainers_weights_as_the_object_store_does(tmp_path, cluster):
    from embodied_rl.config.reasoning import load_reasoning_config
    from embodied_rl.runners.reasoning import ReasoningRunner

    class Checked(ReasoningRunner):
        def _save(self, final):  # at the run's end, its workers still up: check, instead of writing a checkpoint
            trainer, version = ray.get(self.actor.workers[0].get_weights.remote())
            before = ray.get(self.workers.generation.workers[0].get_weights.remote())[0]
            stale = _greedy(self.workers.generation.workers[1])
            ray.get(self.actor.call("sft_update", [("1+1", "2")], 1, 1, 0.1))  # one more step: new weights
            moved, version = ray.get(self.actor.workers[0].get_weights.remote())
            assert any(not np.array_equal(moved[k], v) for k, v in trainer.items())
            self.workers.publish()
            assert self.workers.published_version == version == 3  # SFT, RL, this step
            for worker in self.workers.generation.workers:
                weights, held = ray.get(worker.get_weights.remote())
                assert held == version
                _assert_same(weights, moved)
            broadcast = _greedy(self.workers.generation.workers[1])
            assert broadcast != stale  # the int8 copy was quantised anew
            # back to the old weights, then the same publish through the object store
            ray.get([worker.load_weights.remote((before, 0)) for worker in self.workers.generation.workers])
            self.workers.weights.formed = False  # the same WeightSync, through the object store this time
            self.workers.publish()
            for worker in self.workers.generation.workers:
                weights, held = ray.get(worker.get_weights.remote())
                assert held == version
                _assert_same(weights, moved)
            assert _greedy(self.workers.generation.workers[1]) == broadcast

    config = load_reasoning_config("math_arith", None, SMALL)
    assert config.rollout.weight_sync == "auto"
    runner = Checked(config, tmp_path / "run")
    runner.run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["time/sync_s"] > 0 for r in rows if "sft/loss" in r or "time/iteration_s" in r] == [True] * 2


@pytest.mark.parametrize("overrides, allowed", [(["rollout.weight_sync=nccl"], "auto, broadcast, object_store")])
def test_bad_weight_sync_is_one_config_error(overrides, allowed):
    from embodied_rl.config import ConfigError
    from embodied_rl.config.reasoning import load_reasoning_config

    with pytest.raises(ConfigError, match=f"rollout.weight_sync=.*allowed: {allowed}"):
        load_reasoning_config("math_arith", None, overrides)
