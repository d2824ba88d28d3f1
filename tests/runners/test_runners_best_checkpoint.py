"""best_checkpoint/ keeps the best evaluation: the highest eval.score, and of equal success rates the highest return."""

import json

from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied import BEST_CHECKPOINT_DIR, BEST_RETURN_KEY, EmbodiedRunner
from embodied_rl.utils.checkpoint import load_checkpoint

TINY = ["env.num_workers=1", "env.envs_per_worker=2", "env.max_episode_steps=10", "rollout.steps_per_iteration=10",
        "total_env_steps=120", "eval.every_iterations=1", "eval.num_episodes=2", "checkpoint.every_iterations=0",
        "policy.hidden_sizes=[16]", "algorithm.num_minibatches=2"]


def test_of_equal_success_rates_the_higher_return_breaks_the_tie(tmp_path):
    runner = EmbodiedRunner(load_train_config("maniskill_pushcube", None, []), tmp_path)
    runner.best_score, runner.best_return = 0.5, 10.0
    assert runner.breaks_tie({"eval/success_once": 0.5, "eval/episode_return": 10.5})
    assert not runner.breaks_tie({"eval/success_once": 0.5, "eval/episode_return": 10.0})
    by_return = EmbodiedRunner(load_train_config("maniskill_pushcube", None, ["eval.score=episode_return"]), tmp_path)
    by_return.best_score, by_return.best_return = 10.0, 10.0
    assert not by_return.breaks_tie({"eval/episode_return": 10.0})


def test_a_run_whose_success_never_moves_keeps_the_evaluation_with_the_highest_return(cluster, tmp_path):
    # 10 steps of a random policy never push the cube to the goal: every evaluation ties at success 0
    EmbodiedRunner(load_train_config("maniskill_pushcube", None, TINY), tmp_path).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["train/iteration"], r["eval/success_once"], r["eval/episode_return"]) for r in rows
             if "eval/success_once" in r]
    assert len(evals) == 6 and {s for _, s, _ in evals} == {0.0}
    best_iteration, _, best_return = max(evals, key=lambda e: (e[1], e[2]))  # the first of equal returns
    assert len({r for _, _, r in evals}) > 1  # the returns differ: there is a tie to break
    best = load_checkpoint(tmp_path / BEST_CHECKPOINT_DIR)
    assert best.counters["iteration"] == best_iteration
    assert best.counters[BEST_RETURN_KEY] == best_return
