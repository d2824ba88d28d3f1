"""The sweep's search space from the command line: values, counts, and one-line refusals."""

import pytest

from embodied_rl.config.errors import ConfigError
from embodied_rl.sweep.space import build_space, override_text, parse_seeds, trial_name


def test_grid_samples_and_seeds_multiply():
    space = build_space(["algorithm.lr=[1e-4,3e-4]", "policy.hidden_sizes=[[32,32],[64]]", "eval.greedy=true"],
                        ["algorithm.clip_low=uniform:0.1:0.3", "rollout.steps_per_iteration=choice:[20,40]"],
                        "3", samples=2)
    assert space.grid == {"algorithm.lr": [1e-4, 3e-4], "policy.hidden_sizes": [[32, 32], [64]],
                          "eval.greedy": [True]}
    assert space.sampled == {"algorithm.clip_low": ("uniform", (0.1, 0.3)),
                             "rollout.steps_per_iteration": ("choice", [20, 40])}
    assert space.seeds == [0, 1, 2] and space.trials == 2 * 2 * 1 * 3 * 2
    assert parse_seeds("4,9") == [4, 9]


@pytest.mark.parametrize("grid, sample, seeds, samples, words", [
    (["lr"], [], "1", 1, "KEY=VALUES"),
    (["seed=[1,2]"], [], "1", 1, "--seeds"),
    (["a.b=[]"], [], "1", 1, "no values"),
    ([], ["a.b=normal:0:1"], "1", 1, "allowed: uniform, loguniform"),
    ([], ["a.b=loguniform:0:1"], "1", 1, "LOW > 0"),
    ([], ["a.b=uniform:x:1"], "1", 1, "with numbers"),
    (["a.b=[1,2]"], ["a.b=uniform:0:1"], "1", 1, "both --grid and --sample"),
    (["a.b=[1,2]"], [], "1", 3, "without --sample"),
    ([], [], "0", 1, "--seeds '0'"),
    ([], [], "1,1", 1, "distinct"),
])
def test_bad_spaces_are_one_line(grid, sample, seeds, samples, words):
    with pytest.raises(ConfigError, match=words):
        build_space(grid, sample, seeds, samples)


def test_overrides_and_names_read_back():
    assert override_text("policy.hidden_sizes", [32, 32]) == "policy.hidden_sizes=[32, 32]"
    assert override_text("algorithm.lr", 3e-4) == "algorithm.lr=0.0003"
    assert trial_name(7, {"algorithm.lr": 3e-4, "algorithm.name": "ppo"}, 2) == "trial007-lr=0.0003-name=ppo-seed=2"
