"""Text-run options: the RL learning rate (linear warm-up, then constant, linear or cosine decay to
``lr * min_lr_ratio`` at the last iteration; hand-computed values), prompt formats; bad values, and override values
that do not parse as YAML, are one line naming the key."""

import pytest

from embodied_rl.config.errors import ConfigError
from embodied_rl.config.reasoning import load_reasoning_config, rl_learning_rate


def _rl(*overrides):
    return load_reasoning_config("math_arith", None, ["rl.iterations=6", "rl.lr=1e-5", *overrides]).rl


def test_warm_up_then_each_schedule():
    assert [rl_learning_rate(_rl(), i) for i in range(1, 7)] == [1e-5] * 6
    warm = _rl("rl.warmup_iterations=2", "rl.lr_schedule=linear", "rl.min_lr_ratio=0.1")
    assert [rl_learning_rate(warm, i) for i in range(1, 7)] == pytest.approx([5e-6, 1e-5, 1e-5, 7e-6, 4e-6, 1e-6])
    cosine = _rl("rl.lr_schedule=cosine")
    assert [rl_learning_rate(cosine, i) for i in (1, 6)] == pytest.approx([1e-5, 0.0], abs=1e-12)
    assert rl_learning_rate(cosine, 3) == pytest.approx(1e-5 * 0.5 * (1 + 0.30901699))  # cos(2 pi / 5)


@pytest.mark.parametrize("override, key", [("rl.lr_schedule=step", "rl.lr_schedule"),
                                           ("rl.warmup_iterations=-1", "rl.warmup_iterations"),
                                           ("rl.min_lr_ratio=2", "rl.min_lr_ratio")])
def test_bad_schedule_keys_are_refused(override, key):
    with pytest.raises(ConfigError, match=key):
        _rl(override)


@pytest.mark.parametrize("override, key", [("model.prompt_format=plain", "model.prompt_format"),
                                           ("model.prompt_template=hello", "model.prompt_template"),
                                           ("model.prompt_template={question} =", "model.prompt_template")])
def test_bad_prompt_options_and_unparseable_values_are_one_line(override, key):
    with pytest.raises(ConfigError, match=key) as error:
        load_reasoning_config("math_arith", None, [override])
    assert "\n" not in str(error.value)


def test_an_unparseable_override_of_an_embodied_task_names_it():
    from embodied_rl.config import load_train_config

    with pytest.raises(ConfigError, match=r"policy.hidden_sizes='\[1,' does not parse"):
        load_train_config("maniskill_pushcube", None, ["policy.hidden_sizes=[1,"])


@pytest.mark.parametrize("overrides, key", [(["actor.lora_rank=-1"], "actor.lora_rank"),
                                            (["actor.lora_rank=4", "actor.backend=fsdp", "actor.world_size=2"],
                                             "actor.backend")])
def test_bad_lora_settings_are_one_line(overrides, key):
    with pytest.raises(ConfigError, match=key):
        load_reasoning_config("math_arith", None, overrides)


def test_text_and_embodied_runs_share_the_cluster_section():
    """One ``ClusterConfig`` for both worlds: ``cluster.num_cpus`` sizes a text run's embedded Ray too."""
    from embodied_rl.config.schema import ClusterConfig

    cluster = load_reasoning_config("math_arith", None, ["cluster.num_cpus=2"]).cluster
    assert isinstance(cluster, ClusterConfig) and cluster.num_cpus == 2
    with pytest.raises(ConfigError, match="cluster.num_cpus=0.0 is out of range"):
        load_reasoning_config("math_arith", None, ["cluster.num_cpus=0"])
