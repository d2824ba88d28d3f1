"""Elastic scaling of a live run: env and rollout workers added and removed between iterations on request; every
iteration trains on all its workers' steps, none lost and none counted twice; a request whose new worker cannot
start is rolled back and the run goes on at its old size."""

import json
import sys
import threading
from pathlib import Path

import pytest
import ray
from tests_helpers import act_during_run, ray_worker_pids

import sim_envs
from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.config.loader import to_yaml
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.runners.scale_requests import SCALE_REQUEST_FILE, parse_sizes, request_scale

STEPS = 10  # per env per iteration; episodes of 10 steps that ignore terminations: one episode per env
CONFIG = ["env.num_workers=1", "env.envs_per_worker=2", f"env.max_episode_steps={STEPS}", "env.ignore_terminations=true",
          "rollout.num_workers=1", f"rollout.steps_per_iteration={STEPS}", "total_env_steps=480",
          "eval.every_iterations=0", "eval.num_episodes=4", "checkpoint.every_iterations=0",
          "policy.hidden_sizes=[16]", "algorithm.num_minibatches=2", "algorithm.update_epochs=1"]


# The unbuildable task's factory travels to the env workers by value (tests/ is not on their path).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

NO_SIMULATOR_MARKER: Path | None = None  # while this file exists, new envs of the task below cannot be built


@sim_envs.register_task("test_elastic_unbuildable_pushcube", "PushCube, unbuildable while a marker file exists",
                        "maniskill", "PushCube-v1")
def unbuildable_pushcube(num_envs: int, **overrides):
    from sim_envs.maniskill.tasks import pushcube

    if NO_SIMULATOR_MARKER is not None and NO_SIMULATOR_MARKER.exists():
        raise sim_envs.SimulatorUnavailableError("no simulator for PushCube-v1 on this node")
    return pushcube(num_envs, **overrides)


def assert_trained_what_was_simulated(rows: list[dict]) -> None:
    """Every iteration's actor trained on exactly the env steps its env workers simulated (their own counters)."""
    for row in rows:
        assert row["train/env_steps_trained"] == row["sample/env_steps_simulated"] == row["env_steps"], row


def test_workers_added_and_removed_during_a_run_train_on_every_step_once(cluster, tmp_path):
    config = load_train_config("maniskill_pushcube", None, CONFIG)
    (tmp_path / "config.yaml").write_text(to_yaml(config))  # as `embodied-rl train` writes it
    seen: list = []
    # Env workers of earlier tests in the shared Ray may still be exiting (ray.kill does not wait): not this run's.
    earlier = set(ray_worker_pids("EnvWorker"))

    def scale(sizes: dict) -> None:
        request_scale(tmp_path, **sizes)
        seen.append(len(set(ray_worker_pids("EnvWorker")) - earlier))

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
    assert_trained_what_was_simulated(rows)
    assert all(r["scale/request_to_resized_s"] < 60 and r["scale/resize_s"] < 60 for r in rows if "scale/resize_s" in r)
    assert steps >= 480 and not (tmp_path / SCALE_REQUEST_FILE).exists()
    assert seen == [1, 3]  # env worker processes when each request was made
    saved = load_train_config("maniskill_pushcube", str(tmp_path / "config.yaml"), [])
    assert (saved.env.num_workers, saved.rollout.num_workers) == (2, 1)  # what --resume continues with


def test_a_scale_request_whose_new_worker_cannot_start_is_rolled_back_and_the_run_goes_on(cluster, tmp_path, capfd):
    global NO_SIMULATOR_MARKER
    NO_SIMULATOR_MARKER = tmp_path / "no-simulator"
    config = load_train_config("maniskill_pushcube", None, [*CONFIG, "total_env_steps=120"])
    config.task = "test_elastic_unbuildable_pushcube"
    (tmp_path / "config.yaml").write_text(to_yaml(config))

    def act(step: str) -> None:
        if step == "break":  # the next env worker to start finds no simulator
            NO_SIMULATOR_MARKER.touch()
            request_scale(tmp_path, env=2)
        else:
            NO_SIMULATOR_MARKER.unlink()

    thread = threading.Thread(target=act_during_run, daemon=True, args=(tmp_path, [(2, "break"), (4, "mend")], act))
    thread.start()
    EmbodiedRunner(config, tmp_path).run()
    thread.join(timeout=5)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/iteration"] for r in rows] == list(range(1, 7))
    assert [r["train/iteration"] for r in rows if r.get("scale/rolled_back")] in ([3], [4])
    assert all(r["train/episodes"] == 2 for r in rows)  # one env worker of 2 envs throughout
    assert_trained_what_was_simulated(rows)
    assert rows[-1]["fault/env_workers_replaced"] == 0
    warning = [line for line in capfd.readouterr().err.splitlines() if "scale request" in line]
    assert len(warning) == 1 and warning[0].startswith("warning: scale request rolled back: worker group 'env': "
                                                       "rank 1 failed to start: SimulatorUnavailableError: no "
                                                       "simulator for PushCube-v1 on this node; rolled back to env "
                                                       "workers 1, rollout workers 1"), warning


def test_scale_requests_are_validated_with_one_line(tmp_path):
    assert parse_sizes(["env=6", "rollout=2"]) == {"env": 6, "rollout": 2}
    for bad, key in ((["env=0"], "env"), (["rollout=x"], "rollout"), (["actor=2"], "actor"), ([], "nothing")):
        with pytest.raises(ConfigError, match=key):
            parse_sizes(bad)
    with pytest.raises(ConfigError, match="not a run directory"):
        request_scale(tmp_path, env=2)
