"""A short real MetaWorld training through the runtime (env, rollout and actor workers on Ray): the SFT stage of the
``metaworld_reach`` recipe on MetaWorld's scripted demonstrations takes a policy that almost never reaches the goal
to one that reaches it on at least half of 16 fixed initial states within 150 steps (measured: random actions 0.0,
the clone 0.56 after 400 gradient steps on 20 demonstrations, 0.88 after these 600 on 30)."""

import json

import pytest

from embodied_rl.config.stages import load_stages
from embodied_rl.runners.embodied import EmbodiedRunner


@pytest.mark.slow
def test_sft_on_scripted_reach_demos_makes_the_policy_reach_the_goal(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # demos generated here, not found in a cache
    _, stages = load_stages("metaworld_reach", None, [
        "env.num_workers=1", "env.envs_per_worker=8", "stages.0.algorithm.demo_episodes=30",
        "stages.0.algorithm.gradient_steps=600", "stages.0.algorithm.steps_per_iteration=300",
        "eval.num_episodes=16", "eval.max_episode_steps=150", "eval.sampled=false", "seed=0"])
    sft = stages[0].config
    assert sft.algorithm.name == "sft" and sft.algorithm.demo_source == "scripted"
    before = _random_policy_success(sft.eval.seed, 16, 150)
    final_eval = EmbodiedRunner(sft, tmp_path / "sft").run()

    rows = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train/sft_loss"] for r in rows if "train/sft_loss" in r]
    assert len(losses) == 2 and losses[-1] < 0.5 * losses[0], losses
    assert final_eval["eval/episodes"] == 16 and final_eval["eval/max_episode_steps"] == 150
    assert before <= 0.25 and final_eval["eval/success_once"] >= 0.5, (before, final_eval)


def _random_policy_success(first_state: int, episodes: int, steps: int) -> float:
    """success_once of uniformly random actions on the same fixed states and time limit."""
    import numpy as np

    import sim_envs

    env = sim_envs.make("metaworld_reach", episodes, max_episode_steps=steps, ignore_terminations=True)
    try:
        env.reset(state_ids=list(range(first_state, first_state + episodes)))
        rng = np.random.default_rng(0)
        reached = np.zeros(episodes, bool)
        for _ in range(steps):
            reached |= env.step(rng.uniform(-1, 1, (episodes, 4)).astype(np.float32)).success
        return float(reached.mean())
    finally:
        env.close()
