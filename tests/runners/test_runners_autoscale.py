"""The autoscale policy: hand-computed wait shares, and which side grows for which measurements."""

import json

import pytest

from embodied_rl.config import load_train_config
from embodied_rl.runners.autoscale import Autoscaler, Limits, decide, env_step, wait_shares
from embodied_rl.runners.embodied import EmbodiedRunner

LIMITS = Limits(min_env=1, max_env=4, min_rollout=1, max_rollout=2)


def test_wait_shares_average_each_workers_share():
    env = [{"simulating_s": 3.0, "waiting_for_actions_s": 1.0}, {"simulating_s": 1.0, "waiting_for_actions_s": 1.0}]
    rollout = [{"waiting_s": 9.0, "inferring_s": 1.0}]
    shares = wait_shares(env, rollout)
    assert shares["time/env_waiting_share"] == pytest.approx((0.25 + 0.5) / 2)
    assert shares["time/rollout_idle_share"] == pytest.approx(0.9)
    assert wait_shares([], rollout) == {}


def test_env_workers_waiting_on_busy_rollout_workers_add_a_rollout_worker():
    resize, reason = decide(0.7, 0.1, env_workers=2, rollout_workers=1, limits=LIMITS, threshold=0.4)
    assert resize == {"rollout": 2} and "inference is the bottleneck" in reason
    assert decide(0.7, 0.1, 2, 2, LIMITS, 0.4) is None  # at its maximum


def test_idle_rollout_workers_add_env_workers_then_give_back_a_rollout_worker():
    resize, reason = decide(0.1, 0.8, env_workers=2, rollout_workers=2, limits=LIMITS, threshold=0.4)
    assert resize == {"env": 3} and "spare inference" in reason
    assert decide(0.1, 0.8, 4, 2, LIMITS, 0.4)[0] == {"rollout": 1}  # env at its maximum
    assert decide(0.1, 0.8, 4, 1, LIMITS, 0.4) is None  # rollout at its minimum


def test_sides_taking_turns_get_env_workers_and_busy_sides_nothing():
    assert decide(0.6, 0.5, 1, 1, LIMITS, 0.4)[0] == {"env": 2}  # each waits for the other: add overlap
    assert decide(0.2, 0.2, 2, 1, LIMITS, 0.4) is None


def test_grpo_adds_env_workers_in_whole_groups():
    assert env_step(envs_per_worker=2, group_size=8) == 4
    assert env_step(envs_per_worker=4, group_size=2) == 1
    limits = Limits(1, 8, 1, 2, env_step=4)
    assert decide(0.1, 0.8, 4, 1, limits, 0.4)[0] == {"env": 8}
    assert decide(0.1, 0.8, 6, 1, limits, 0.4) is None  # 10 is past the maximum; the rollout worker is the last


def test_the_autoscaler_decides_on_a_full_window_of_means():
    scaler = Autoscaler(LIMITS, threshold=0.4, every_iterations=3)
    for env_waiting in (0.9, 0.5, 0.1):  # mean 0.5
        assert scaler.proposal(2, 1) is None
        scaler.observe({"time/env_waiting_share": env_waiting, "time/rollout_idle_share": 0.2})
    assert scaler.proposal(2, 1)[0] == {"rollout": 2}
    assert scaler.window == []  # the next decision measures afresh


STEPS = 10
CONFIG = ["env.num_workers=1", "env.envs_per_worker=2", f"env.max_episode_steps={STEPS}", "env.ignore_terminations=true",
          f"rollout.steps_per_iteration={STEPS}", "total_env_steps=200", "eval.every_iterations=0",
          "eval.num_episodes=2", "checkpoint.every_iterations=0", "policy.hidden_sizes=[16]",
          "algorithm.num_minibatches=2", "algorithm.update_epochs=1", "autoscale.enabled=true",
          "autoscale.every_iterations=2", "placement.slots=2"]


def test_a_live_run_adds_env_workers_while_its_rollout_worker_idles_up_to_the_placement(cluster, tmp_path):
    """A 16-unit MLP answers in a fraction of the time 2 envs take to simulate: the rollout worker idles, so the
    run grows its env workers, up to the 2 env slots of its placement, and stays there."""
    EmbodiedRunner(load_train_config("maniskill_pushcube", None, CONFIG), tmp_path).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(r["time/rollout_idle_share"] > 0.4 for r in rows[:2])  # what the decision saw
    resized = [(r["train/iteration"], r["scale/env_workers"], r["scale/autoscaled"]) for r in rows
               if "scale/env_workers" in r]
    assert resized == [(3, 2, 1.0)]  # after the first window; at 2 (the placement's slots) it stops
    env_workers, steps = 1, 0
    for row in rows:  # every step of every env worker counted once
        env_workers = row.get("scale/env_workers", env_workers)
        steps += env_workers * 2 * STEPS
        assert row["train/episodes"] == env_workers * 2 and row["env_steps"] == steps, row
