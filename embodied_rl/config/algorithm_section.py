"""The ``algorithm`` section of a config: its keys depend on ``algorithm.name``, so it is merged as plain data from
every source and then typed by the chosen algorithm's own config dataclass (a key the algorithm does not have is
refused with the keys it does have)."""

from __future__ import annotations

from dataclasses import fields

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from embodied_rl.config.errors import ConfigError

DEFAULT_ALGORITHM = "ppo"


def split_algorithm(source: DictConfig | None) -> tuple[DictConfig | None, dict]:
    """``source`` without its ``algorithm`` section, and that section as a plain dict ({} when absent)."""
    if source is None or "algorithm" not in source:
        return source, {}
    section = OmegaConf.to_container(source.algorithm, resolve=True) if source.algorithm is not None else {}
    if not isinstance(section, dict):
        raise ConfigError(f"algorithm={section!r}: expected a mapping of algorithm keys to values")
    rest = OmegaConf.masked_copy(source, [k for k in source if k != "algorithm"])
    return rest, section


def typed_algorithm(sections: list[dict], recipe: dict | None = None):
    """Merge ``sections`` (later ones win) over the task recipe's section and build the named algorithm's config
    dataclass.

    The recipe tunes the algorithm it names (default ppo); when the user picks another one, the recipe's keys that
    the chosen algorithm also has (lr, update_epochs, ...) still apply and the others are left out.
    """
    from embodied_rl.algorithms.embodied import ALGORITHMS

    merged: dict = {}
    for section in sections:
        merged.update(section)
    recipe = dict(recipe or {})
    name = merged.get("name", recipe.get("name", DEFAULT_ALGORITHM))
    if name not in ALGORITHMS:
        raise ConfigError(f"algorithm.name={name!r} is not a registered algorithm; allowed: "
                          f"{', '.join(ALGORITHMS.names())}")
    config_class = ALGORITHMS.get(name).config_class
    allowed = [f.name for f in fields(config_class)]
    if recipe.get("name", DEFAULT_ALGORITHM) != name:
        recipe = {k: v for k, v in recipe.items() if k in allowed and k != "name"}
    merged = {**recipe, **merged, "name": name}
    for key in merged:
        if key not in allowed:
            raise ConfigError(f"algorithm.{key} is not a key of algorithm {name!r}; its keys: {', '.join(allowed)}")
    try:
        typed = OmegaConf.merge(OmegaConf.structured(config_class), merged)
        return OmegaConf.to_object(typed)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or ""
        message = str(error).strip().splitlines()[0]
        raise ConfigError(f"algorithm.{key}: {message}" if key else f"algorithm: {message}") from None


def keys_of(name: str, section: dict) -> dict:
    """The entries of ``section`` that algorithm ``name`` has (its name excluded; unknown names keep nothing)."""
    from embodied_rl.algorithms.embodied import ALGORITHMS

    if name not in ALGORITHMS:
        return {}
    allowed = {f.name for f in fields(ALGORITHMS.get(name).config_class)} - {"name"}
    return {k: v for k, v in section.items() if k in allowed}
