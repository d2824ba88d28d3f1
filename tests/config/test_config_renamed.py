"""One concept, one name: renamed keys are refused with the new name; saved configs from before a rename still load;
``algorithm.name`` on a staged recipe switches the stages that sample the env."""

import pytest

from embodied_rl.config import ConfigError, load_train_config
from embodied_rl.config.reasoning import load_reasoning_config
from embodied_rl.config.renamed import RENAMED, refuse_renamed, upgrade_algorithm_section
from embodied_rl.config.stages import load_stages


@pytest.mark.parametrize("override, new", [("algorithm.filter_groups=true", "algorithm.dynamic_sampling"),
                                           ("algorithm.step_weighting=episode", "algorithm.loss_agg"),
                                           ("algorithm.normalize_std=false", "algorithm.name=dr_grpo")])
def test_renamed_embodied_keys_are_refused_naming_the_new_key(override, new):
    with pytest.raises(ConfigError, match=f"{override.split('=')[0]} .*renamed; use {new}"):
        load_train_config("maniskill_pushcube", None, ["algorithm.name=grpo", override])


def test_renamed_keys_are_refused_inside_stages_and_on_text_tasks(tmp_path):
    with pytest.raises(ConfigError, match="stages.1.algorithm.filter_groups .*algorithm.dynamic_sampling"):
        refuse_renamed({"stages": [{}, {"algorithm": {"filter_groups": True}}]}, "a file")
    with pytest.raises(ConfigError, match="rl.max_sampling_rounds .*use algorithm.max_sampling_rounds"):
        load_reasoning_config("math_arith", None, ["rl.max_sampling_rounds=2"])
    assert all(old != new.split()[0] for old, new in RENAMED.items())


def test_a_saved_config_from_before_the_rename_is_translated():
    old = {"name": "grpo", "filter_groups": True, "step_weighting": "episode", "normalize_std": False}
    assert upgrade_algorithm_section(old) == {"name": "dr_grpo", "dynamic_sampling": True,
                                              "loss_agg": "seq-mean-token-mean"}
    assert upgrade_algorithm_section({"name": "grpo", "step_weighting": "step"}) == {"name": "grpo",
                                                                                      "loss_agg": "token-mean"}


def test_algorithm_name_on_a_staged_recipe_switches_the_stages_that_sample_the_env():
    _, stages = load_stages("maniskill_pickcube", None, ["algorithm.name=dapo", "algorithm.clip_high=0.3"])
    assert [s.name for s in stages] == ["0-sft", "1-dapo"]
    sft, rl = (s.config.algorithm for s in stages)
    assert sft.name == "sft" and rl.name == "dapo"
    assert rl.group_size == 4 and rl.lr == pytest.approx(3e-5) and rl.clip_high == 0.3  # the recipe's keys stay
    with pytest.raises(ConfigError, match="algorithm.name=sft: .*stages.N.algorithm.name"):
        load_stages("maniskill_pickcube", None, ["algorithm.name=sft"])
    with pytest.raises(ConfigError, match="algorithm.name='nope' is not a registered algorithm; allowed: .*gspo"):
        load_stages("maniskill_pickcube", None, ["algorithm.name=nope"])


def test_a_run_directory_saved_before_the_renames_resumes_and_evaluates(tmp_path):
    """A saved config.yaml with old keys at the top level and in a stage loads as the run's own (``saved``) and
    is refused as a user's --config file."""
    from embodied_rl.config.loader import from_yaml_file, to_yaml

    base = load_train_config("maniskill_pushcube", None, ["stages=[]", "algorithm.name=grpo", "env.max_episode_steps=50",
                                                          "algorithm.group_size=4"])
    text = to_yaml(base).replace("  greedy: true", "  deterministic: false").replace(
        "  dynamic_sampling: null", "  filter_groups: true")
    assert "deterministic: false" in text and "filter_groups: true" in text
    path = tmp_path / "config.yaml"
    path.write_text(text)
    resumed = load_train_config(None, str(path), [], saved=True)
    assert resumed.eval.greedy is False and resumed.algorithm.dynamic_sampling is True
    loaded = from_yaml_file(path)
    assert loaded.eval.greedy is False and loaded.algorithm.dynamic_sampling is True
    with pytest.raises(ConfigError, match="renamed; use (eval.greedy|algorithm.dynamic_sampling)"):
        load_train_config(None, str(path), [])


@pytest.mark.parametrize("override, message", [
    ("generation.engine=vllm", "generation.engine .*renamed; use rollout.engine"),
    ("trainer.world_size=2", "trainer.world_size .*renamed; use actor.world_size"),
    ("rl.max_staleness=1", "rl.max_staleness .*renamed; use rollout.max_staleness"),
    ("generation={}", "generation .*renamed; use rollout$")])
def test_text_run_sections_renamed_to_rollout_and_actor_are_refused(override, message):
    with pytest.raises(ConfigError, match=message):
        load_reasoning_config("math_arith", None, [override])


def test_a_text_run_directory_saved_before_the_section_renames_resumes(tmp_path):
    """A text run's saved config.yaml with ``generation``, ``trainer`` and ``rl.max_staleness`` loads as the run's
    own config with the values kept, and is refused as a user's --config file."""
    from embodied_rl.config.reasoning import reasoning_yaml

    config = load_reasoning_config("math_arith", None, ["rollout.max_new_tokens=3", "rollout.max_staleness=1",
                                                        "actor.timeout_s=77"])
    text = reasoning_yaml(config).replace("rollout:", "generation:").replace("actor:", "trainer:").replace(
        "  max_staleness: 1\n", "")
    text = text.replace("rl:\n", "rl:\n  max_staleness: 1\n")
    assert "generation:" in text and "trainer:" in text and "max_staleness: 1" in text
    path = tmp_path / "config.yaml"
    path.write_text(text)
    resumed = load_reasoning_config(None, str(path), [], saved=True)
    assert (resumed.rollout.max_new_tokens, resumed.rollout.max_staleness, resumed.actor.timeout_s) == (3, 1, 77.0)
    with pytest.raises(ConfigError, match="renamed; use (rollout|actor)"):
        load_reasoning_config(None, str(path), [])
