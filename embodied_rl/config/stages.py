"""Staged recipes: a config whose ``stages`` list chains runs (e.g. SFT on demonstrations, then GRPO).

Each stage is a mapping of config keys merged over the recipe and the user's file; its ``name`` labels it. The
command line applies to every stage, except ``algorithm.*`` keys, which reach the stages whose algorithm has them
(a key no stage's algorithm has is refused; ``algorithm.name`` replaces the algorithm of the stages that sample the
env, e.g. GRPO by DAPO after the SFT stage), and ``stages.N.<key>=value``, which sets a key of stage N only.
``stages=[]`` runs the recipe's base config as one run.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import OmegaConf

from embodied_rl.config.algorithm_section import DEFAULT_ALGORITHM, keys_of
from embodied_rl.config.errors import ConfigError
from embodied_rl.config.loader import load_train_config
from embodied_rl.config.schema import TrainConfig


@dataclass
class Stage:
    name: str
    config: TrainConfig


def _split_overrides(overrides: list[str]) -> tuple[list[str], dict, dict[int, list[str]]]:
    common, algorithm, per_stage = [], {}, {}
    for item in overrides:
        key, _, value = item.partition("=")
        if key.startswith("algorithm."):
            algorithm[key[len("algorithm."):]] = item
        elif key.startswith("stages.") and key.count(".") >= 2:
            index, _, rest = key[len("stages."):].partition(".")
            if not index.isdigit():
                raise ConfigError(f"{key}: stages are numbered from 0 (e.g. stages.1.total_env_steps=100000)")
            per_stage.setdefault(int(index), []).append(f"{rest}={value}")
        else:
            common.append(item)
    return common, algorithm, per_stage


def _drop_other_algorithms_keys(entry: dict, recipe_algorithm: str, overridden: set) -> None:
    """A stage switched to another algorithm (``stages.N.algorithm.name=...``) keeps only the recipe's keys the new
    algorithm has (``lr`` and the like), as a switch of the top-level algorithm does."""
    import dataclasses

    from embodied_rl.algorithms.embodied.base import algorithm_config_class

    section = entry.get("algorithm") or {}
    name = section.get("name", DEFAULT_ALGORITHM)
    if name == recipe_algorithm:
        return
    try:
        fields = {f.name for f in dataclasses.fields(algorithm_config_class(name))}
    except KeyError:
        return  # an unknown name: validation reports it with the allowed names
    entry["algorithm"] = {k: v for k, v in section.items() if k in fields or f"algorithm.{k}" in overridden}


def _trains_on_demonstrations_only(name: str) -> bool:
    from embodied_rl.algorithms.embodied import ALGORITHMS

    algorithm = ALGORITHMS.get(name)
    return algorithm.needs(algorithm.config_class()).demonstrations == "only"


def _switch_rl_stages(stages: list, item: str, per_stage: dict[int, list[str]]) -> None:
    """``algorithm.name=X`` on a staged recipe: every stage that samples the env (not SFT) runs X instead, keeping
    the recipe's keys X also has (a GRPO-family member keeps the recipe's group size, clip, learning rate...)."""
    from embodied_rl.algorithms.embodied import ALGORITHMS

    name = item.partition("=")[2]
    if name not in ALGORITHMS:
        raise ConfigError(f"algorithm.name={name!r} is not a registered algorithm; allowed: "
                          f"{', '.join(ALGORITHMS.names())}")
    names = [str(s.get("name", i)) for i, s in enumerate(stages)]
    rl = [i for i, s in enumerate(stages)
          if not _trains_on_demonstrations_only((s.get("algorithm") or {}).get("name", DEFAULT_ALGORITHM))]
    if _trains_on_demonstrations_only(name) or not rl:
        raise ConfigError(f"algorithm.name={name}: this recipe runs stages ({', '.join(names)}) and "
                          f"algorithm.name replaces the algorithm of those that sample the env ("
                          f"{', '.join(names[i] for i in rl) or 'none'}) with an RL algorithm; choose a stage's "
                          "algorithm with stages.N.algorithm.name=..., or run one config with stages=[]")
    for index in rl:
        per_stage.setdefault(index, []).insert(0, f"algorithm.name={name}")
        if stages[index].get("name") == (stages[index].get("algorithm") or {}).get("name"):
            per_stage[index].insert(0, f"name={name}")  # the stage's directory is named for what it runs


def load_stages(task: str | None = None, config_file: str | None = None,
                overrides: list[str] | None = None, saved: bool = False) -> tuple[TrainConfig, list[Stage]]:
    """The base config (with its ``stages``) and the runs a training command makes: one per stage of a staged
    recipe, else one named 'train'. ``saved``: ``config_file`` is a run's own config.yaml (see
    ``load_train_config``)."""
    overrides = list(overrides or [])
    common, algorithm, per_stage = _split_overrides(overrides)
    # Without the command line's algorithm keys the base may pair a policy with an algorithm it does not fit
    # (policy.name=mlp_sac algorithm.name=sac): the algorithm's rules are checked on each run's own config below.
    base = load_train_config(task, config_file, common, purpose="eval", saved=saved)
    if not base.stages:
        single = load_train_config(task, config_file, overrides, saved=saved)
        return single, [Stage("train", single)]
    if "name" in algorithm:
        _switch_rl_stages(base.stages, algorithm.pop("name"), per_stage)
    for index in per_stage:
        if index >= len(base.stages):
            raise ConfigError(f"stages.{index}: this recipe has stages 0-{len(base.stages) - 1}")
    stages, used, recorded = [], set(), []
    for index, raw in enumerate(base.stages):
        entry = OmegaConf.create(raw)
        recipe_algorithm = (raw.get("algorithm") or {}).get("name", DEFAULT_ALGORITHM)
        overridden = set()
        for item in per_stage.get(index, []):
            key, _, value = item.partition("=")
            OmegaConf.update(entry, key, OmegaConf.from_dotlist([f"value={value}"]).value, force_add=True)
            overridden.add(key)
        entry = OmegaConf.to_container(entry, resolve=True)
        _drop_other_algorithms_keys(entry, recipe_algorithm, overridden)
        name = str(entry.pop("name", f"stage{index}"))
        algorithm_name = (entry.get("algorithm") or {}).get("name", DEFAULT_ALGORITHM)
        mine = keys_of(algorithm_name, {k: v for k, v in algorithm.items()})
        used |= set(mine)
        config = load_train_config(task, config_file, common + list(mine.values()), stage=entry, saved=saved)
        stages.append(Stage(f"{index}-{name}", config))
        recorded.append({"name": name, **_resolved_entry(config)})
    unused = sorted(set(algorithm) - used)
    if unused:
        names = ", ".join(s.config.algorithm.name for s in stages)
        raise ConfigError(f"algorithm.{unused[0]} is not a key of any stage's algorithm ({names})")
    # The run's config.yaml records each stage as it runs (the command line's per-stage and algorithm keys in
    # it), so `--resume` and `report` read the stages that ran, not the recipe's.
    base.stages = recorded
    return base, stages


def _resolved_entry(config: TrainConfig) -> dict:
    """A stage's resolved config as a ``stages`` entry: every key (so the entry alone reproduces it over any
    base), less what the runner sets per stage (``run_dir``) and the nested ``stages``."""
    import yaml

    from embodied_rl.config.loader import to_yaml

    entry = yaml.safe_load(to_yaml(config))
    for key in ("stages", "run_dir"):
        entry.pop(key, None)
    return entry
