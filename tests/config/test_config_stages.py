"""Staged recipes: the stages a run records are the stages it ran."""

from embodied_rl.config.stages import load_stages


def test_the_recorded_config_reproduces_every_stage_with_the_command_lines_stage_keys(tmp_path):
    """A run's config.yaml (what `--resume` and `report` read) holds each stage as it ran: the algorithm switched
    by algorithm.name, a stage's own override, and a common override of a key the recipe's stages set."""
    from embodied_rl.config.loader import to_yaml

    overrides = ["algorithm.name=ppo", "stages.1.total_env_steps=8000", "eval.num_episodes=64", "algorithm.lr=1e-4"]
    base, stages = load_stages("maniskill_pickcube", None, overrides)
    saved = tmp_path / "config.yaml"
    saved.write_text(to_yaml(base))
    _, again = load_stages(None, str(saved), [], saved=True)
    assert [s.name for s in again] == [s.name for s in stages] == ["0-sft", "1-ppo"]
    for first, second in zip(stages, again):
        assert to_yaml(first.config) == to_yaml(second.config)
    assert again[1].config.total_env_steps == 8000 and again[1].config.algorithm.lr == 1e-4
    assert again[0].config.eval.num_episodes == again[1].config.eval.num_episodes == 64
