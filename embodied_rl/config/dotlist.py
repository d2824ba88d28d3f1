"""Command-line overrides (``key=value``) parsed as OmegaConf does, with a value that is not valid YAML (text
starting with ``{`` or ``[``, a lone ``:``) refused in one line naming the override."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from embodied_rl.config.errors import ConfigError


def parse_overrides(overrides: list[str]) -> DictConfig:
    """``OmegaConf.from_dotlist(overrides)``; ``ConfigError`` naming the first override whose value does not parse."""
    for item in overrides:
        try:
            OmegaConf.from_dotlist([item])
        except Exception as error:  # noqa: BLE001 - yaml and OmegaConf raise several kinds
            key, _, value = item.partition("=")
            problem = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ConfigError(f"{key}={value!r} does not parse ({problem}); quote text that YAML would read as a "
                              f"mapping or list, e.g. {key}=\"'{value}'\"") from None
    return OmegaConf.from_dotlist(overrides)
