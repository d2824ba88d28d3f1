"""A short real PushCube training run through the runtime (env, rollout and actor workers on Ray): PPO from a random
policy reaches a success threshold on fixed initial states at ManiSkill's 50-step limit."""

import json

import pytest

from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.utils.checkpoint import list_checkpoints


@pytest.mark.slow
def test_short_pushcube_run_reaches_a_success_threshold(cluster, tmp_path):
    # End-effector control on the task's relevant features (gripper, tcp, goal, cube) learns within a CI budget;
    # the recipe's joint control needs ~100k env steps. deterministic=true: the run depends on the seed only, not
    # on how Ray batched the env workers' requests (without it, 1 run in 7 ended under the threshold). Measured:
    # sampled success 0.44 on 32 fixed states after these 8,000 steps (0.16 at 4,000).
    config = load_train_config("maniskill_pushcube", None, [
        "stages=[]", "env.control_mode=pd_ee_delta_pos", "policy.options.obs_indices=[7,8,18,19,20,25,26,27,28,29,30]",
        "env.num_workers=4", "env.envs_per_worker=4", "rollout.steps_per_iteration=50", "total_env_steps=8000",
        "eval.every_iterations=5", "eval.num_episodes=32", "eval.greedy=false",
        "checkpoint.every_iterations=5", "seed=0", "deterministic=true"])
    runner = EmbodiedRunner(config, tmp_path)
    final_eval = runner.run()

    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 10 and rows[-1]["env_steps"] == 8000
    assert rows[0]["train/success_once"] <= 0.15  # a random policy rarely pushes the cube onto the goal
    assert final_eval["eval/episodes"] == 32 and final_eval["eval/greedy"] is False
    assert final_eval["eval/success_once"] >= 0.3, final_eval
    # Every trajectory was produced by the policy version that the actor had just published.
    assert all(r["train/policy_staleness"] == 0 for r in rows)
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["iter_000005", "iter_000010"]
    assert any((tmp_path / "tensorboard").iterdir())
