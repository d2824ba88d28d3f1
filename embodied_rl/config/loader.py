"""Merge schema defaults, the task's recipe, a user YAML file and ``key=value`` overrides into a TrainConfig.

Recipes ship inside the package (``embodied_rl/configs/``; a clone also reaches them through the top-level
``configs`` link). Every built-in task has one, and a missing one is an error; a task registered by a user has
none and starts from the schema defaults.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from embodied_rl.config.algorithm_section import DEFAULT_ALGORITHM, keys_of, split_algorithm, typed_algorithm
from embodied_rl.config.dotlist import parse_overrides
from embodied_rl.config.errors import ConfigError
from embodied_rl.config.policy_choice import choose_policy
from embodied_rl.config.renamed import refuse_renamed, upgrade_saved
from embodied_rl.config.schema import TrainConfig, validate

CONFIGS_DIR = resources.files("embodied_rl") / "configs"  # a Traversable: a directory, or a folder in a zip


def recipe_path(task: str):
    """Where the recipe of built-in task ``task`` lives: ``embodied_rl/configs/<task>.yaml``."""
    return CONFIGS_DIR / f"{task}.yaml"


EXTENDS_KEY = "extends"
"""A recipe's top-level ``extends: <name>`` puts it over the recipe ``embodied_rl/configs/<name>.yaml`` (itself
possibly extending another): the family recipe ``metaworld.yaml`` holds what the MetaWorld tasks share, and each
``metaworld_<task>.yaml`` only what differs. Mappings merge key by key; a list (``stages``) replaces the base's."""


def read_recipe(name: str, seen: tuple[str, ...] = ()):
    """The recipe ``embodied_rl/configs/<name>.yaml`` with its ``extends`` chain merged (base first)."""
    path = CONFIGS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"recipe {name!r} extended by {seen[-1]!r} does not exist ({path})" if seen else
                          f"recipe {name!r} does not exist ({path})")
    recipe = OmegaConf.create(path.read_text())
    base = recipe.pop(EXTENDS_KEY, None) if OmegaConf.is_dict(recipe) else None
    if base is None:
        return recipe
    if not isinstance(base, str) or base in seen or base == name:
        raise ConfigError(f"recipe {name!r}: extends={base!r} must name another recipe (no cycles)")
    return OmegaConf.merge(read_recipe(base, (*seen, name)), recipe)


def task_recipe(task: str, algorithm: str | None = None):
    """The recipe of a built-in task (a ConfigError when it is missing); for a task of a family that ships a
    shared recipe (``TaskEntry.recipe``, e.g. ``gym`` for ``gym:<id>``) that recipe, or ``<recipe>_<algorithm>``
    where one exists for the chosen ``algorithm``; None for a task a user registered."""
    import sim_envs

    try:
        entry = sim_envs.get_task(task)
    except sim_envs.TaskConfigError as error:
        raise ConfigError(str(error)) from None
    if not entry.builtin:
        if entry.recipe is None:
            return None
        specific = f"{entry.recipe}_{algorithm or DEFAULT_ALGORITHM}"
        return read_recipe(specific if recipe_path(specific).is_file() else entry.recipe)
    recipe = recipe_path(task)
    if not recipe.is_file():
        raise ConfigError(f"built-in task {task!r} has no recipe: {recipe} is missing (an incomplete install of "
                          "embodied-rl; reinstall it)")
    return read_recipe(task)


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
                      overrides: list[str] | None = None, stage: dict | None = None,
                      purpose: str = "train", saved: bool = False) -> TrainConfig:
    """Resolve a run's configuration; every problem becomes a ``ConfigError`` naming the key.

    ``stage``: one entry of a recipe's ``stages`` (see ``embodied_rl.config.stages``), merged over the recipe and
    the user's file (a stage's own keys are the more specific), under the command line; the file's and the command
    line's algorithm keys then apply only where the stage's algorithm has them. ``purpose``: see ``validate``.
    ``saved``: ``config_file`` is a run directory's own ``config.yaml`` (``--resume``, ``eval``): keys renamed since
    it was written are translated, not refused.
    """
    # ``placement=auto``: short for placement.auto=true (placement is a section; this is its one scalar spelling)
    overrides = ["placement.auto=true" if item.replace(" ", "") == "placement=auto" else item
                 for item in overrides or []]
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value (e.g. algorithm.lr=1e-4)")
    try:
        merged = OmegaConf.structured(TrainConfig)
        user_yaml = _load_yaml(Path(config_file)) if config_file else None
        if saved and user_yaml is not None:
            upgrade_saved(user_yaml)
        refuse_renamed(user_yaml, f"--config {config_file}")
        cli_yaml = parse_overrides(overrides)
        refuse_renamed(cli_yaml, "command line")
        user_file, user_algorithm = split_algorithm(user_yaml)
        cli, cli_algorithm = split_algorithm(cli_yaml)
        recipe_algorithm: dict = {}
        chosen_task = task or cli.get("task") or (user_file.get("task") if user_file is not None else None)
        if chosen_task:
            chosen_algorithm = cli_algorithm.get("name") or user_algorithm.get("name")
            recipe = task_recipe(chosen_task, chosen_algorithm if stage is None else None)
            refuse_renamed(recipe, f"the {chosen_task} recipe")
            if recipe is not None:
                recipe_config, recipe_algorithm = split_algorithm(recipe)
                merged = OmegaConf.merge(merged, recipe_config)
            merged.task = chosen_task
        if user_file is not None:
            merged = OmegaConf.merge(merged, user_file)
        stage_algorithm: dict = {}
        if stage is not None:
            stage_config, stage_algorithm = split_algorithm(OmegaConf.create(stage))
            merged = OmegaConf.merge(merged, stage_config, {"stages": []})
        merged = OmegaConf.merge(merged, cli)
        if task:
            merged.task = task
        config: TrainConfig = OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        raise ConfigError(_one_line(error)) from None
    if stage is not None:
        name = stage_algorithm.get("name", recipe_algorithm.get("name", DEFAULT_ALGORITHM))
        user_algorithm, cli_algorithm = (keys_of(name, section) for section in (user_algorithm, cli_algorithm))
        config.algorithm = typed_algorithm([user_algorithm, stage_algorithm, cli_algorithm],
                                           recipe=recipe_algorithm)
    else:
        config.algorithm = typed_algorithm([user_algorithm, cli_algorithm], recipe=recipe_algorithm)
    choose_policy(config)
    validate(config, purpose)
    return config


def to_yaml(config: TrainConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))


def from_yaml_file(path: Path) -> TrainConfig:
    """Load a resolved config saved in a run directory."""
    try:
        loaded = OmegaConf.load(path)
        upgrade_saved(loaded)
        rest, algorithm = split_algorithm(loaded)
        config = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainConfig), rest))
    except OmegaConfBaseException as error:
        raise ConfigError(f"{path}: {_one_line(error)}") from None
    config.algorithm = typed_algorithm([algorithm])
    return config
