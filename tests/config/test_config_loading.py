import pytest

from embodied_rl.config import ConfigError, load_train_config


def test_task_recipe_overrides_schema_defaults_and_cli_overrides_recipe():
    config = load_train_config("maniskill_pushcube", None, ["algorithm.lr=1e-4", "env.num_workers=2"])
    assert config.task == "maniskill_pushcube"
    assert config.algorithm.num_minibatches == 32  # from configs/maniskill_pushcube.yaml
    assert config.algorithm.lr == pytest.approx(1e-4)
    assert config.env.num_workers == 2


def test_user_yaml_file_is_merged(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("algorithm:\n  gamma: 0.95\nrollout:\n  steps_per_iteration: 10\n")
    config = load_train_config("maniskill_pushcube", str(path), [])
    assert config.algorithm.gamma == pytest.approx(0.95)
    assert config.rollout.steps_per_iteration == 10


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.lrr=1"], "algorithm.lrr"),
    (["algorithm.lr=abc"], "algorithm.lr"),
    (["algorithm.gamma=2"], "algorithm.gamma=2.0 is out of range; allowed: 0 <= gamma <= 1"),
    (["env.num_workers=0"], "env.num_workers=0 is out of range"),
    (["env.obs_mode=depth"], "env.obs_mode='depth'"),
    (["nokey"], "must look like key=value"),
    (["algorithm.num_minibatches=100000"], "algorithm.num_minibatches"),
    (["policy.name=nope"], "policy.name='nope' is out of range; allowed: "),
    (["policy.name=transformer", "policy.options.depth=3"],
     "policy.options.depth=3 is out of range; allowed: options of policy 'transformer': token_size"),
    (["policy.options.token_size=2"], "allowed: options of policy 'mlp': action_chunk, obs_indices"),
    (["algorithm.ratio_level=chunk"], "algorithm.ratio_level='chunk' is out of range; allowed: decision, token"),
    (["algorithm.ratio_level=token"], "algorithm.ratio_level='token' needs a policy with token log-probs "
                                      "(openvla, openvla_oft, pi0); policy.name='mlp'"),
    (["algorithm.name=sac"], "policy.name='mlp' does not fit algorithm.name='sac', which needs a policy with Q "
                             "critics (q_values, sample); allowed: mlp_sac"),
    (["algorithm.name=rlpd", "policy.name=mlp_sac", "algorithm.q_subsample=3"],
     "algorithm.q_subsample=3 is out of range; allowed: at most the policy's critics (policy.options.num_q=2)"),
    (["algorithm.name=sac", "policy.name=mlp_sac", "algorithm.buffer_size=10"],
     "algorithm.buffer_size=10 is out of range; allowed: an integer >= batch_size (256)"),
    (["algorithm.name=sac", "policy.name=mlp_sac", "algorithm.clone_kl_weight=0.5"],
     "algorithm.clone_kl_weight=0.5 needs the residual actor on a frozen clone; allowed: policy.options.residual=true"),
    (["algorithm.name=sac", "policy.name=mlp_sac", "algorithm.bootstrap_at=never"],
     "algorithm.bootstrap_at='never' is out of range; allowed: truncation, always"),
    (["algorithm.name=sft", "policy.name=cnn", "env.obs_mode=rgb", "algorithm.update_epochs=2"],
     "algorithm.update_epochs is not a key of algorithm 'sft'"),
    (["eval.split=lighting"], "eval.split='lighting' is out of range; allowed: null or one of vision, semantic, "
                              "execution"),
    (["eval.ood_splits=[vision,weather]"], "eval.ood_splits='weather' is out of range; allowed: a list of vision, "
                                           "semantic, execution"),
    (["placement.offload=sometimes"], "placement.offload='sometimes' is out of range; allowed: auto, never"),
    (["placement.actor_threads=0"], "placement.actor_threads=0 is out of range; allowed: null or an integer >= 1"),
    (["rollout.weight_sync=carrier_pigeon"],
     "rollout.weight_sync='carrier_pigeon' is out of range; allowed: auto, broadcast, object_store"),
])
def test_bad_values_raise_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as error:
        load_train_config("maniskill_pushcube", None, overrides)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_ood_splits_are_for_maniskill_tasks_only():
    assert load_train_config("maniskill_pushcube", None, ["eval.ood_splits=[execution]"]).eval.ood_splits == [
        "execution"]
    with pytest.raises(ConfigError, match="eval.split='vision' is out of range; allowed: only for the ManiSkill tasks "
                                          "with OOD splits .*; task 'metaworld_reach' has none"):
        load_train_config("metaworld_reach", None, ["eval.split=vision"])


def test_unknown_task_and_missing_or_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="unknown task 'nope'"):
        load_train_config("nope", None, [])
    with pytest.raises(ConfigError, match="file not found"):
        load_train_config("maniskill_pushcube", str(tmp_path / "missing.yaml"), [])
    broken = tmp_path / "broken.yaml"
    broken.write_text("algorithm: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_train_config("maniskill_pushcube", str(broken), [])


def test_policy_options_are_loaded_from_overrides():
    config = load_train_config("maniskill_pickcube", None, ["policy.name=transformer", "policy.options.token_size=2",
                                                            "policy.options.num_layers=1"])
    assert config.policy.options == {"token_size": 2, "num_layers": 1}


GROUPED_CHUNKS = ["algorithm.name=grpo", "algorithm.group_size=2", "env.num_workers=1", "env.envs_per_worker=2",
                  "policy.options.action_chunk=8", "env.max_episode_steps=96", "rollout.steps_per_iteration=96"]


def test_evaluation_configs_skip_the_training_algorithms_rules():
    """A GRPO checkpoint with 8-step chunks evaluates at ManiSkill's 50-step limit; training there is refused
    (grouped episodes run whole chunks in lock-step)."""
    with pytest.raises(ConfigError, match="action_chunk=8 is out of range"):
        load_train_config("maniskill_pushcube", None, [*GROUPED_CHUNKS, "env.max_episode_steps=50"])
    config = load_train_config("maniskill_pushcube", None, [*GROUPED_CHUNKS, "env.max_episode_steps=50"],
                               purpose="eval")
    assert config.env.max_episode_steps == 50
    with pytest.raises(ConfigError, match="eval.max_episode_steps=0 is out of range"):  # eval's own rules still hold
        load_train_config("maniskill_pushcube", None, [*GROUPED_CHUNKS, "eval.max_episode_steps=0"], purpose="eval")
