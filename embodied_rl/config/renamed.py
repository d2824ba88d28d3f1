"""Keys that were renamed: one concept, one name (docs/vocabulary.md). An old key in a recipe, a ``--config`` file or
a ``key=value`` override is refused with one line naming the new key; a run directory's saved ``config.yaml`` from
before the rename is read with the old keys translated (``upgrade_saved``), so old runs still resume and evaluate."""

from __future__ import annotations

import re

from embodied_rl.config.errors import ConfigError

RENAMED = {
    "algorithm.filter_groups": "algorithm.dynamic_sampling",
    "algorithm.step_weighting": "algorithm.loss_agg (step -> token-mean, episode -> seq-mean-token-mean)",
    "algorithm.normalize_std": "algorithm.name=dr_grpo (normalize_std=false) or the grpo default (true)",
    "rl.max_sampling_rounds": "algorithm.max_sampling_rounds",
    "eval.deterministic": "eval.greedy (the top-level deterministic is reproducible sampling; this one picks "
                          "greedy actions)",
    "rl.max_staleness": "rollout.max_staleness (as on embodied tasks)",
}
"""Old dotted key -> what to write instead."""

RENAMED_SECTIONS = {"generation": "rollout", "trainer": "actor"}
"""Old section -> new section, every key inside kept (text runs: the generation workers are rollout workers, the
trainer is the actor, as on embodied tasks)."""

_STAGE_PREFIX = re.compile(r"^stages\.\d+\.")


def dotted_keys(tree, prefix: str = "") -> list[str]:
    """Every leaf's (and section's) dotted key of nested mappings and lists."""
    keys = []
    items = tree.items() if hasattr(tree, "items") else enumerate(tree) if isinstance(tree, (list, tuple)) else ()
    for key, value in items:
        path = f"{prefix}{key}"
        keys.append(path)
        if hasattr(value, "items") or isinstance(value, (list, tuple)):
            keys.extend(dotted_keys(value, path + "."))
    return keys


def refuse_renamed(tree, source: str) -> None:
    """Raise ConfigError naming the new key when ``tree`` (a plain or OmegaConf mapping read from ``source``) uses a
    renamed key, at the top level or inside a recipe's ``stages``."""
    if tree is None:
        return
    container = tree
    if not isinstance(tree, (dict, list)):
        from omegaconf import OmegaConf

        container = OmegaConf.to_container(tree, resolve=False)
    keys = dotted_keys(container)
    for key in keys:
        plain = _STAGE_PREFIX.sub("", key)
        if plain in RENAMED:
            raise ConfigError(f"{key} ({source}) was renamed; use {RENAMED[plain]}")
    in_renamed_section = [key for key in keys if _STAGE_PREFIX.sub("", key).split(".")[0] in RENAMED_SECTIONS]
    if in_renamed_section:  # name a key inside the section where there is one
        key = next((key for key in in_renamed_section if "." in _STAGE_PREFIX.sub("", key)), in_renamed_section[0])
        section, _, rest = _STAGE_PREFIX.sub("", key).partition(".")
        raise ConfigError(f"{key} ({source}) was renamed; use {RENAMED_SECTIONS[section]}{'.' + rest if rest else ''}")


MOVED = {"algorithm.filter_groups": "algorithm.dynamic_sampling",
         "rl.max_sampling_rounds": "algorithm.max_sampling_rounds", "eval.deterministic": "eval.greedy",
         "rl.max_staleness": "rollout.max_staleness"}
"""The renames that keep the value (the others are translated in ``upgrade_algorithm_section``)."""


def upgrade_saved(tree) -> None:
    """A run directory's saved config (an OmegaConf mapping read from its ``config.yaml``, changed in place) with
    every renamed key translated, at the top level and in each stage: old runs resume and evaluate."""
    from omegaconf import OmegaConf

    for section in [tree, *(tree.get("stages") or [])]:
        for old, new in RENAMED_SECTIONS.items():
            if section.get(old) is not None:
                moved = section.pop(old)
                section[new] = OmegaConf.merge(section.get(new) or {}, moved)
        for old, new in MOVED.items():
            old_section, old_key = old.split(".")
            new_section, new_key = new.split(".")
            part = section.get(old_section)
            if part is not None and old_key in part:
                value = part.pop(old_key)
                if section.get(new_section) is None:
                    section[new_section] = {}
                section[new_section][new_key] = value
        if section.get("algorithm") is not None:
            upgraded = upgrade_algorithm_section(OmegaConf.to_container(section.algorithm))
            section["algorithm"] = upgraded


def upgrade_algorithm_section(section: dict) -> dict:
    """A saved run's ``algorithm`` section with the renamed keys translated (for configs written before the
    rename)."""
    section = dict(section)
    if "filter_groups" in section:
        section["dynamic_sampling"] = section.pop("filter_groups")
    if "step_weighting" in section:
        section["loss_agg"] = {"step": "token-mean", "episode": "seq-mean-token-mean"}[section.pop("step_weighting")]
    if "normalize_std" in section:
        if not section.pop("normalize_std") and section.get("name") == "grpo":
            section["name"] = "dr_grpo"
            section.setdefault("loss_agg", "token-mean")
    return section
