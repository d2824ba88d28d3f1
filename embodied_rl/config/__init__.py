"""Typed configuration: dataclass schema, YAML recipes in ``embodied_rl/configs/``, ``key=value`` overrides,
validation."""

from embodied_rl.config.errors import ConfigError
from embodied_rl.config.loader import load_train_config
from embodied_rl.config.schema import TrainConfig

__all__ = ["ConfigError", "TrainConfig", "load_train_config"]
