"""Elastic scaling of a live run: env and rollout workers added and removed between iterations on request; every
iteration trains on all its workers' steps, none lost and none counted twice."""

import json
import threading

import pytest
from tests_helpers import act_during_run, ray_worker_pids

from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.config.loader import to_yaml
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.runners.scale_requests import SCALE_REQUEST_FILE, parse_sizes, request_scale

STEPS = 10  # per env per iteration; episodes of 10 steps that ignore terminations: one episode per env
CONFIG = ["env.num_workers=1", "env.envs_per_worker=2", f"env.max_episode_steps={STEPS}", "env.ignore_terminations=true",
          "rollout.num_workers=1", f"rollout.steps_per_iteration={STEPS}", "total_env_steps=480",
          "eval.every_iterations=0", "eval.num_episodes=4", "checkpoint.every_iterations=0",
          "policy.hidden_sizes=[16]", "algorithm.num_minibatches=2", "algorithm.update_epochs=1"]


def test_workers_added_and_removed_during_a_run_train_on_every_step_once(cluster, tmp_path):
    config = load_train_config("maniskill_pushcube", None, CONFIG)
    (tmp_path / "config.yaml").write_text(to_yaml(config))  # as `embodied-rl train` writes it
    seen: list = []
    def scale(sizes: dict) -> None:
        request_scale(tmp_path, **sizes)
        seen.append(len(ray_worker_pids("EnvWorker")))

    thread = threading.Thread(target=act_during_run, daemon=True, args=(
        tmp_path, [(2, {"env": 3, "rollout": 2}), (5, {"env": 2, "rollout": 1})], scale))
    thread.start()
    EmbodiedRunner(config, tmp_path).run()
    thread.join(timeout=5)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    scaled = [(r["train/iteration"], r["scale/env_workers"], r["scale/rollout_workers"]) for r in rows
              if "scale/env_workers" in r]
    assert [s[1:] for s in scaled] == [(3, 2), (2, 1)]
    env_workers, steps = 1, 0
    for row in rows:  # each iteration: one episode per env of every env worker it had, and its steps counted once
        env_workers = row.get("scale/env_workers", env_workers)
        envs = env_workers * 2
        steps += envs * STEPS
        assert row["train/episodes"] == envs and row["env_steps"] == steps, row
    assert all(r["scale/request_to_resized_s"] < 60 and r["scale/resize_s"] < 60 for r in rows if "scale/resize_s" in r)
    assert steps >= 480 and not (tmp_path / SCALE_REQUEST_FILE).exists()
    assert seen == [1, 3]  # env worker processes when each request was made
    saved = load_train_config("maniskill_pushcube", str(tmp_path / "config.yaml"), [])
    assert (saved.env.num_workers, saved.rollout.num_workers) == (2, 1)  # what --resume continues with


def test_scale_requests_are_validated_with_one_line(tmp_path):
    assert parse_sizes(["env=6", "rollout=2"]) == {"env": 6, "rollout": 2}
    for bad, key in ((["env=0"], "env"), (["rollout=x"], "rollout"), (["actor=2"], "actor"), ([], "nothing")):
        with pytest.raises(ConfigError, match=key):
            parse_sizes(bad)
    with pytest.raises(ConfigError, match="not a run directory"):
        request_scale(tmp_path, env=2)
