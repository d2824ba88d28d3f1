"""A short off-policy run that learns: RLPD (SAC with demonstrations in half of every batch) from a random policy on
PushCube-v1 at ManiSkill's 50-step limit, through the real runtime, evaluated on fixed initial states."""

import json

import pytest

from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner

PUSHCUBE_FEATURES = "[7,8,18,19,20,25,26,27,28,29,30]"  # gripper, tcp position, goal, cube position


# Left out of the default run (CI time; pytest -m heavy runs it):
# the off-policy runtime path is in test_runners_off_policy.py
@pytest.mark.heavy
@pytest.mark.slow
def test_rlpd_from_scratch_raises_pushcube_success_at_the_standard_limit(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # demos generated here, not from a cache
    config = load_train_config("maniskill_pushcube", None, [
        "stages=[]", "algorithm.name=rlpd", "policy.name=mlp_sac", "policy.hidden_sizes=[256,256]",
        "policy.options.critic_layer_norm=true", "policy.options.action_chunk=5",
        f"policy.options.obs_indices={PUSHCUBE_FEATURES}", "env.control_mode=pd_ee_delta_pos",
        "env.max_episode_steps=50", "env.num_workers=2", "env.envs_per_worker=8",
        "algorithm.demo_episodes=50", "algorithm.demo_planner_speed=2.0", "algorithm.utd_ratio=0.5",
        "algorithm.init_alpha=0.1", "total_env_steps=12000", "eval.every_iterations=5", "eval.num_episodes=32",
        "checkpoint.every_iterations=0", "seed=0",
        "deterministic=true"])  # the run depends on the seed, not on how Ray batched requests (0.22 < 0.25 once)
    EmbodiedRunner(config, tmp_path / "run").run()

    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    first = [rows[0]["train/success_once"]]  # the random policy's round (the second already follows one update)
    evaluations = [r["eval/success_once"] for r in rows if "eval/success_once" in r]
    assert max(first) <= 0.1, f"a random policy should rarely push the cube onto the goal: {first}"
    assert len(evaluations) >= 2 and max(evaluations) >= 0.25, \
        f"RLPD did not learn PushCube within 12k env steps: evaluations {evaluations}"
