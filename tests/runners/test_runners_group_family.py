"""Text algorithms of the GRPO family on an embodied task, through the real runtime (ManiSkill PickCube env workers,
rollout and actor workers on Ray): DAPO's dynamic sampling and GSPO's one ratio per episode train the policy."""

import json

import pytest
import torch

from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.utils.checkpoint import load_checkpoint

TINY = ["env.num_workers=1", "env.envs_per_worker=4", "env.max_episode_steps=10", "rollout.steps_per_iteration=10",
        "total_env_steps=120", "eval.every_iterations=0", "eval.num_episodes=2", "checkpoint.every_iterations=0",
        "policy.hidden_sizes=[16]", "algorithm.group_size=4", "algorithm.num_minibatches=2",
        "algorithm.score=return", "algorithm.max_sampling_rounds=2", "seed=1"]


@pytest.mark.slow
@pytest.mark.parametrize("name, family_metric", [("dapo", "train/informative_fraction"), ("gspo", None)])
def test_a_text_family_member_trains_on_pickcube(cluster, tmp_path, name, family_metric):
    config = load_train_config("maniskill_pickcube", None, ["stages=[]", f"algorithm.name={name}", *TINY])
    assert config.algorithm.name == name
    EmbodiedRunner(config, tmp_path).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r.get("train/needs_more") == 0]
    assert trained and all(r["train/gradient_steps"] > 0 for r in trained)
    assert all(r["train/groups_sampled"] == 1 for r in rows)  # 4 envs, one group of 4
    if family_metric:
        assert all(family_metric in r for r in rows)
    assert sum(r["train/groups_trained"] for r in trained) == len(trained)
    weights = load_checkpoint(tmp_path).weights
    assert all(torch.isfinite(torch.as_tensor(w)).all() for w in weights.values())


@pytest.mark.slow
def test_updates_of_groups_per_update_groups_take_the_rounds_that_hold_them(cluster, tmp_path):
    """2 groups of 2 a round, every group kept (no dynamic sampling), groups_per_update=3: each update is built
    from 2 rounds (4 groups), the loop asking the env workers for the second."""
    overrides = [*TINY, "stages=[]", "algorithm.name=grpo", "algorithm.group_size=2", "algorithm.groups_per_update=3",
                 "algorithm.max_sampling_rounds=3", "total_env_steps=160"]
    EmbodiedRunner(load_train_config("maniskill_pickcube", None, overrides), tmp_path).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r.get("train/needs_more") == 0]
    assert len(trained) == 2 and all(r["train/gradient_steps"] > 0 for r in trained)
    assert all(r["train/sampling_rounds"] == 2 and r["train/groups_trained"] == 4 for r in trained)
