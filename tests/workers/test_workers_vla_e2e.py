"""Tiny VLAs on the real runtime: PushCube camera observations (rgb + state + instruction), action chunks executed
by env workers, batched VLA inference in the rollout worker, and the actor's update. Before its first gradient step
the actor recomputes the log-probs of the sampled decisions: they must equal those the rollout worker computed, so
whatever a policy stores of its decisions (Pi0's denoising chain) must travel intact through the channel."""

import json

import numpy as np
import pytest
import torch

from embodied_rl.config import load_train_config
from embodied_rl.runners import setup
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.workers.actor_worker import ActorWorker

TINY_VLA_RUN = ["env.obs_mode=rgb", "env.num_workers=1", "env.envs_per_worker=2", "policy.options.action_chunk=4",
                "rollout.steps_per_iteration=16", "total_env_steps=32", "env.max_episode_steps=16",
                "algorithm.num_minibatches=2", "algorithm.update_epochs=1", "eval.num_episodes=1",
                "eval.every_iterations=0", "checkpoint.every_iterations=0", "seed=5"]


def _checking_actor(record_path: str) -> type:
    """An actor that, before each update, recomputes the stored decisions' log-probs with the weights that sampled
    them and writes down the largest difference (defined here so Ray pickles it by value)."""

    class CheckingActorWorker(ActorWorker):
        def _optimize(self, samples: dict) -> dict:
            with torch.no_grad():
                logp, _, values = self.policy.evaluate(samples["obs"], samples["actions"])
                token_logp, _, _ = self.policy.evaluate_tokens(samples["obs"], samples["actions"])
            stored_tokens = samples["obs"]["stored.token_logp"]
            record = {"max_logp_difference": float((logp - samples["old_logp"]).abs().max()),
                      "max_token_logp_difference": float((token_logp - stored_tokens).abs().max()),
                      "tokens": int(stored_tokens.shape[1]),
                      "samples": int(len(logp)), "keys": sorted(samples["obs"]),
                      "actions_shape": list(samples["actions"].shape), "finite_values": bool(values.isfinite().all())}
            with open(record_path, "a") as file:
                file.write(json.dumps(record) + "\n")
            return super()._optimize(samples)

    return CheckingActorWorker


@pytest.mark.slow
@pytest.mark.parametrize("policy, algorithm, stored", [
    ("openvla_oft", ["algorithm.name=ppo", "algorithm.ratio_level=token"], None),
    ("pi0", ["algorithm.name=grpo", "algorithm.group_size=2", "algorithm.score=return"], "stored.chain"),
])
def test_tiny_vla_samples_and_trains_on_the_runtime_with_matching_log_probs(cluster, tmp_path, monkeypatch, policy,
                                                                            algorithm, stored):
    record_path = tmp_path / "actor_checked.jsonl"
    monkeypatch.setattr(setup, "ActorWorker", _checking_actor(str(record_path)))
    config = load_train_config("maniskill_pushcube", None, [*TINY_VLA_RUN, f"policy.name={policy}", *algorithm])
    final_eval = EmbodiedRunner(config, tmp_path / "run").run()

    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r.get("train/gradient_steps", 0) > 0]
    assert trained and all(np.isfinite(r["train/policy_loss"]) for r in trained)
    assert final_eval["eval/episodes"] == 1
    checked = [json.loads(line) for line in record_path.read_text().splitlines()]
    assert checked
    for record in checked:
        assert record["max_logp_difference"] < 1e-4 and record["max_token_logp_difference"] < 1e-5, record
        assert record["tokens"] >= 4 * 4  # at least one per action dimension of the chunk
        assert record["actions_shape"][1] == 4  # chunks of 4 actions
        assert {"rgb", "state", "instruction"} <= set(record["keys"]) and record["finite_values"]
        if stored:
            assert stored in record["keys"]
