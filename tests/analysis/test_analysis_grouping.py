"""Runs grouped into settings by their configs, seeds and paths aside."""

from embodied_rl.analysis.grouping import config_differences, group_runs
from embodied_rl.analysis.runs import Run


def _run(name, seed, algorithm, lr=1e-3, run_dir=None):
    config = {"seed": seed, "run_dir": run_dir or f"/runs/{name}", "algorithm.name": algorithm, "algorithm.lr": lr,
              "task": "maniskill_pickcube"}
    return Run(path=__import__("pathlib").Path(name), config=config, stages=[])


def test_seeds_of_one_config_are_one_setting_labelled_by_what_differs():
    runs = [_run("a", 0, "grpo"), _run("b", 0, "ppo"), _run("c", 1, "grpo"), _run("d", 1, "ppo")]
    settings = group_runs(runs)
    assert [s.label for s in settings] == ["name=grpo", "name=ppo"]
    assert [[r.name for r in s.runs] for s in settings] == [["a", "c"], ["b", "d"]]
    assert config_differences(runs) == {"algorithm.name": ["grpo", "ppo", "grpo", "ppo"]}


def test_names_lead_the_label_a_redundant_key_is_left_out_and_group_by_overrides():
    runs = [_run("a", 0, "grpo", 1e-3), _run("b", 0, "ppo", 1e-3), _run("c", 0, "grpo", 3e-4)]
    assert [s.label for s in group_runs(runs)] == ["name=grpo, lr=0.001", "name=ppo, lr=0.001", "name=grpo, lr=0.0003"]
    # lr splits these runs exactly as the algorithm does: the label names the algorithm only
    assert [s.label for s in group_runs(runs[:2])] == ["name=grpo", "name=ppo"]
    same = group_runs(runs[:2], group_by=["task"])
    assert len(same) == 1 and same[0].label == "task=maniskill_pickcube"
    assert group_runs([_run("a", 0, "grpo"), _run("b", 1, "grpo")])[0].label == "all runs"
