"""Merge schema defaults, the task's recipe, a user YAML file and ``key=value`` overrides into a TrainConfig."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from embodied_rl.config.errors import ConfigError
from embodied_rl.config.schema import TrainConfig, validate

CONFIGS_DIR = Path(__file__).resolve().parents[2] / "configs"


def recipe_path(task: str) -> Path:
    """The task's recipe ``configs/<task>.yaml`` (may not exist: schema defaults then apply)."""
    return CONFIGS_DIR / f"{task}.yaml"


def _one_line(error: OmegaConfBaseException) -> str:
    key = getattr(error, "full_key", None)
    message = str(error).strip().splitlines()[0]
    if "Key '" in message and "not in" in message:
        message = message.split(" not in ")[0] + " is not a known key"
    return f"{key}: {message}" if key else message


def _load_yaml(path: Path):
    if not path.is_file():
        raise ConfigError(f"--config {path}: file not found")
    try:
        loaded = OmegaConf.load(path)
    except Exception as error:  # yaml.YAMLError and friends: report, don't trace
        raise ConfigError(f"--config {path}: not valid YAML ({str(error).splitlines()[0]})") from None
    if not OmegaConf.is_dict(loaded):
        raise ConfigError(f"--config {path}: expected a mapping of keys to values")
    return loaded


def load_train_config(task: str | None = None, config_file: str | None = None,
                      overrides: list[str] | None = None) -> TrainConfig:
    """Resolve a run's configuration; every problem becomes a ``ConfigError`` naming the key."""
    overrides = list(overrides or [])
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value (e.g. algorithm.lr=1e-4)")
    try:
        merged = OmegaConf.structured(TrainConfig)
        user_file = _load_yaml(Path(config_file)) if config_file else None
        cli = OmegaConf.from_dotlist(overrides)
        chosen_task = task or cli.get("task") or (user_file.get("task") if user_file is not None else None)
        if chosen_task:
            import sim_envs

            try:
                sim_envs.get_task(chosen_task)
            except sim_envs.TaskConfigError as error:
                raise ConfigError(str(error)) from None
            recipe = recipe_path(chosen_task)
            if recipe.is_file():
                merged = OmegaConf.merge(merged, OmegaConf.load(recipe))
            merged.task = chosen_task
        if user_file is not None:
            merged = OmegaConf.merge(merged, user_file)
        merged = OmegaConf.merge(merged, cli)
        if task:
            merged.task = task
        config: TrainConfig = OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        raise ConfigError(_one_line(error)) from None
    validate(config)
    return config


def to_yaml(config: TrainConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))


def from_yaml_file(path: Path) -> TrainConfig:
    """Load a resolved config saved in a run directory."""
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainConfig), OmegaConf.load(path)))
    except OmegaConfBaseException as error:
        raise ConfigError(f"{path}: {_one_line(error)}") from None
