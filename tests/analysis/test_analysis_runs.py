"""Run directories read back: stages laid end to end, the final evaluation, expansion of folders of runs."""

import pytest

from embodied_rl.analysis.runs import find_runs, flatten, load_run
from embodied_rl.config.errors import ConfigError
from tests_helpers import write_run

SFT = ("sft", [{"env_steps": 0, "train/sft_loss": 0.5, "time/elapsed_s": 90.0},
               {"env_steps": 0, "time/elapsed_s": 100.0, "eval/success_once": 0.25}], {"wall_s": 120.0})
GRPO = ("grpo", [{"env_steps": 400, "time/elapsed_s": 10.0, "train/success_once": 0.5},
                 {"env_steps": 800, "time/elapsed_s": 30.0, "eval/success_once": 0.75, "eval/episode_return": 3.0}],
        {"wall_s": 40.0})


def test_stages_are_laid_end_to_end(tmp_path):
    run = load_run(write_run(tmp_path / "r", {"seed": 3, "stages": [{"name": "sft"}, {"name": "grpo"}]}, [SFT, GRPO]))
    assert [stage.name for stage in run.stages] == ["0-sft", "1-grpo"] and run.seed == 3
    assert run.curve("eval/success_once") == ([0.0, 800.0], [0.25, 0.75])
    # wall time: the GRPO stage starts after the SFT stage's 120 s (its summary), not after its last row's 100 s
    assert run.curve("eval/success_once", "wall_s") == ([100.0, 150.0], [0.25, 0.75])
    assert run.final_evaluation()["eval/episode_return"] == 3.0
    assert run.env_steps == 800 and run.wall_s == 160.0
    assert run.env_steps_per_s() == pytest.approx(800 / 40.0)  # only the stage that stepped envs


def test_a_cut_line_and_a_running_stage_are_read(tmp_path):
    path = write_run(tmp_path / "r", {"seed": 0}, [("train", GRPO[1], {})])
    with open(path / "metrics.jsonl", "a") as handle:
        handle.write('{"env_steps": 1200, "eval/succ')  # a crash cut the last line
    run = load_run(path)
    assert run.stages[0].name == "train" and len(run.stages[0].rows) == 2
    assert run.wall_s == 30.0  # no summary yet: the last time/elapsed_s


def test_folders_of_runs_expand_and_bad_paths_are_one_line(tmp_path):
    for trial in ("a", "b"):
        write_run(tmp_path / "sweep" / f"trial_{trial}" / "run", {"seed": 0}, [SFT, GRPO])
    runs = find_runs([tmp_path / "sweep"])
    assert [run.path.parent.name for run in runs] == ["trial_a", "trial_b"]
    assert [run.name for run in runs] == ["trial_a/run", "trial_b/run"]  # same directory name: named by parent
    (tmp_path / "empty").mkdir()
    for bad, words in ((tmp_path / "missing", "no such directory"), (tmp_path / "empty", "holds no run")):
        with pytest.raises(ConfigError, match=words):
            find_runs([bad])


def test_flatten_names_list_items_by_index():
    assert flatten({"a": {"b": 1, "c": [{"d": 2}, 3]}, "e": {}}) == {"a.b": 1, "a.c.0.d": 2, "a.c.1": 3, "e": {}}


def test_each_stages_own_config_is_the_runs_config_of_that_stage(tmp_path):
    """Runs whose root config.yaml did not record a switched algorithm: their stage directories' configs tell."""
    from embodied_rl.analysis.grouping import group_runs

    runs = []
    for algorithm in ("grpo", "ppo"):
        for seed in (0, 1):
            config = {"seed": seed, "stages": [{"name": "sft"}, {"name": "grpo"}]}
            path = write_run(tmp_path / f"{algorithm}{seed}", config, [SFT, (algorithm, GRPO[1], GRPO[2])])
            (path / f"1-{algorithm}" / "config.yaml").write_text(
                f"seed: {seed}\nrun_dir: {path}/1-{algorithm}\ninit_from: x\nalgorithm:\n  name: {algorithm}\n")
            runs.append(load_run(path))
    assert runs[1].config["stages.1.algorithm.name"] == "grpo" and "stages.1.run_dir" not in runs[1].config
    assert [s.label for s in group_runs(runs)] == ["name=grpo", "name=ppo"]  # stages.1.seed is a seed too
