"""rollout.inline: each env worker computes its own actions in its own process (no rollout worker processes, no
channel round trip per step) and takes the weight syncs; the same computation as the rollout workers', and the
same recovery when an env worker dies."""

import json

import numpy as np
import pytest
import ray
from tests_helpers import kill_during_sample

from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.runners.resize import ScaleError
from embodied_rl.runners.setup import start_workers


TINY = ["deterministic=true", "env.num_workers=2", "env.envs_per_worker=2", "env.max_episode_steps=15",
        "rollout.steps_per_iteration=10", "total_env_steps=80", "eval.every_iterations=2", "eval.num_episodes=4",
        "checkpoint.every_iterations=0", "policy.hidden_sizes=[16]", "algorithm.num_minibatches=2",
        "algorithm.update_epochs=2"]


def learning_rows(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k.split("/")[0] in ("train", "eval")} for row in rows]


def test_an_inline_run_learns_exactly_what_a_run_with_rollout_workers_learns(cluster, tmp_path):
    # Seeded sampling answers every request in a pass of its own under its seed, wherever it runs: the two runs
    # must agree bit for bit, weight syncs included (a missed sync would act with older weights and differ).
    served, inline = tmp_path / "served", tmp_path / "inline"
    EmbodiedRunner(load_train_config("maniskill_pushcube", None, TINY), served).run()
    EmbodiedRunner(load_train_config("maniskill_pushcube", None, [*TINY, "rollout.inline=true"]), inline).run()
    expected, got = learning_rows(served), learning_rows(inline)
    assert [r["train/iteration"] for r in got] == [1, 2]
    assert expected[0]["train/policy_loss"] != expected[1]["train/policy_loss"]
    assert got == expected
    # the inline run measured its env workers' own forward passes, and nothing waited for a rollout worker
    rows = [json.loads(line) for line in (inline / "metrics.jsonl").read_text().splitlines()]
    assert "time/rollout_idle_share" not in rows[-1]


def test_inline_env_workers_are_the_samplers_and_a_killed_one_is_replaced_with_the_weights(cluster):
    config = load_train_config("maniskill_pushcube", None, [
        "env.num_workers=2", "env.envs_per_worker=2", "env.max_episode_steps=50", "rollout.inline=true",
        "rollout.steps_per_iteration=200", "algorithm.num_minibatches=2", "policy.hidden_sizes=[16]"])
    workers = start_workers(config, cluster)
    try:
        assert workers.rollout is workers.env and workers.inline
        workers.form_weight_broadcast()
        assert workers.broadcast_weights() == 0
        workers.sample(20)
        seconds = workers.last_env_seconds
        assert len(seconds) == 2 and all(s["inferring_s"] > 0 and s["waiting_for_actions_s"] == 0 for s in seconds)

        pid = ray.get(workers.env.workers[0].process_id.remote())
        episodes = kill_during_sample(workers, "EnvWorker", pid, 200)
        assert workers.faults["fault/env_workers_replaced"] == 1 and workers.trajectories_sent == 1
        assert len(episodes) == 2 * 4  # the surviving worker's 2 envs, 4 episodes of 50 steps each
        trained, version = ray.get(workers.actor.workers[0].get_weights.remote(False))
        held, held_version = ray.get(workers.env.workers[0].get_weights.remote())
        assert held_version == version and held.keys() == trained.keys()
        assert all(np.array_equal(held[k], trained[k]) for k in trained)
        ray.get(workers.actor.call("update", workers.trajectories_sent)[0])
        assert workers.broadcast_weights() == 1  # the broadcast group was formed anew with the replacement
        assert ray.get(workers.env.workers[0].get_weights.remote())[1] == 1

        with pytest.raises(ScaleError, match="rollout=2: with rollout.inline=true"):
            workers.resize(rollout_workers=2)
    finally:
        workers.shutdown()


def test_inline_policies_refuse_the_autoscaler():
    with pytest.raises(ConfigError, match="rollout.inline=true with autoscale.enabled=true"):
        load_train_config("maniskill_pushcube", None, ["rollout.inline=true", "autoscale.enabled=true"])
