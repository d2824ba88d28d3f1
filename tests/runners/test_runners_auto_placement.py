"""placement.auto: the cost model against hand-computed iterations, the choice it makes from a profile, the real
profile on a ManiSkill task, and a run that chooses, says why and records it."""

import json

import pytest
import yaml

from embodied_rl.commands.plan import run_plan
from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.runners.auto_placement import ComponentProfile, candidates, choose, predict
from embodied_rl.runners.embodied import EmbodiedRunner

SETTINGS = ["stages=[]", "env.num_workers=2", "env.envs_per_worker=8", "rollout.num_workers=1",
            "rollout.steps_per_iteration=10"]


def profile(inference_8: float = 0.002) -> ComponentProfile:
    """10 ms per step of 8 envs; inference 1 / 2 / 3 ms at batch 4 / 8 / 16 (``inference_8`` at 8); 0.5 ms per
    request and answer; updates of 0.4 s on one thread and 0.25 s on two; 1 MB of weights."""
    return ComponentProfile(envs=8, sim_s=0.01, inference_s={4: 0.001, 8: inference_8, 16: 0.003}, message_s=0.0005,
                            update_s={1: 0.4, 2: 0.25}, weight_bytes=1_000_000)


def by_name(cores: int = 2, disjoint_only: bool = False) -> dict:
    return {c.name: c for c in candidates(cores, 8, disjoint_only)}


def test_predicted_iterations_match_hand_computed_ones():
    config = load_train_config("maniskill_pushcube", None, SETTINGS)
    found, p, sync = by_name(), profile(), 0.001  # 1 MB of weights at 1 GB/s
    # inline, 2 workers on 2 cores: 10 decisions x (10 ms sim + 2 ms inference); update on 2 threads
    assert predict(p, found["collocated_inline"], config, 2)["iteration_s"] == pytest.approx(0.12 + 0.25 + sync)
    # a rollout worker: a cycle of sim + message + a pass over both workers' 16 rows = 13.5 ms; the work,
    # 2 x (10 + 0.25) + 3 + 2 x 0.25 = 24 ms, over 2 cores is less
    assert predict(p, found["collocated"], config, 2)["sampling_s"] == pytest.approx(0.135)
    # two stages: one simulates (10 ms) while the other's 8 rows are inferred (5 + 0.5 + 2 ms); the work over 2
    # cores: (20.5 + 2 x 2 + 0.5) / 2 = 12.5 ms per decision
    assert predict(p, found["collocated_pipelined"], config, 2)["sampling_s"] == pytest.approx(0.125)
    # sampling on core 0 alone (24 ms of work per decision), the update on core 1's one thread
    assert predict(p, found["split"], config, 2)["iteration_s"] == pytest.approx(0.24 + 0.4 + sync)
    overlapped = load_train_config("maniskill_pushcube", None, [*SETTINGS, "rollout.max_staleness=1",
                                                                "placement.components={'env,rollout': '0', "
                                                                "'actor': '1'}"])
    assert predict(p, found["split"], overlapped, 2)["iteration_s"] == pytest.approx(0.4 + sync)  # the larger


def test_the_choice_follows_the_profile():
    config = load_train_config("maniskill_pushcube", None, SETTINGS)
    assert choose(config, profile=profile(), cores=2).candidate.name == "collocated_inline"
    # inference as costly as the simulator (a transformer): one stage infers while the other simulates
    heavy = ComponentProfile(8, 0.01, {4: 0.005, 8: 0.01, 16: 0.02}, 0.0005, {1: 0.4, 2: 0.25}, 1_000_000)
    one_worker = load_train_config("maniskill_pushcube", None, [*SETTINGS, "env.num_workers=1"])
    choice = choose(one_worker, profile=heavy, cores=2)
    assert choice.candidate.name == "collocated_pipelined" and choice.candidate.pipeline_stages == 2
    assert "chose collocated_pipelined" in choice.report()
    overlapped = load_train_config("maniskill_pushcube", None, [*SETTINGS, "rollout.max_staleness=1",
                                                                "placement.components={'env,rollout': '0', "
                                                                "'actor': '1'}"])
    assert set(choose(overlapped, profile=profile(), cores=2).predictions) == {"split", "split_inline"}


def test_auto_placement_refuses_what_it_cannot_weigh():
    assert load_train_config("maniskill_pushcube", None, ["placement=auto"]).placement.auto
    # overlap needs disjoint slots: auto only weighs those, so the default (shared) placement is not refused first
    assert load_train_config("maniskill_pushcube", None, ["placement=auto", "rollout.max_staleness=1"]).placement.auto
    with pytest.raises(ConfigError, match="placement.auto=true models on-policy updates; algorithm.name=sac"):
        load_train_config("maniskill_pushcube", None, ["stages=[]", "placement=auto", "algorithm.name=sac"])


def test_plan_profile_measures_the_task_and_names_a_choice(cluster, capsys):
    run_plan("maniskill_pushcube", None, ["stages=[]", "env.num_workers=1", "env.envs_per_worker=2",
                                          "policy.hidden_sizes=[32]", "rollout.steps_per_iteration=10",
                                          "algorithm.num_minibatches=2"],
             1, "80GB", True, profile=True)
    plan = json.loads(capsys.readouterr().out)[0]["auto_placement"]
    assert plan["chosen"]["name"] in plan["predicted_iteration_s"]
    assert min(plan["predicted_iteration_s"].values()) == plan["predicted_iteration_s"][plan["chosen"]["name"]]
    assert "simulator" in plan["report"] and "request + answer" in plan["report"]


def test_a_run_with_auto_placement_chooses_records_and_trains(cluster, tmp_path):
    config = load_train_config("maniskill_pushcube", None, [
        "stages=[]", "placement=auto", "env.num_workers=1", "env.envs_per_worker=2", "env.max_episode_steps=10",
        "rollout.steps_per_iteration=10", "total_env_steps=40", "eval.every_iterations=0", "eval.num_episodes=2",
        "checkpoint.every_iterations=0", "policy.hidden_sizes=[16]", "algorithm.num_minibatches=2"])
    (tmp_path / "config.yaml").write_text("task: maniskill_pushcube\nplacement:\n  auto: true\n")
    EmbodiedRunner(config, tmp_path).run()
    report = (tmp_path / "auto_placement.txt").read_text()
    assert "chose " in report and "predicted" in report
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["placement"]["auto"] is False and saved["placement"]["components"]
    assert saved["placement"]["auto_report"].strip() == report.strip()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] == 40
