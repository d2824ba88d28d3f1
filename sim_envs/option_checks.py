"""What every simulator family's env options share: unknown keys refused, and the family-wide ranges checked, each
in one line naming the option (``TaskConfigError``)."""

from __future__ import annotations

from dataclasses import fields

from sim_envs.errors import TaskConfigError


def build_options(cls, overrides: dict):
    """``cls(**overrides)`` (a family's options dataclass) after refusing keys it does not have, with the ranges of
    the options every family takes checked; the family then checks its own values."""
    allowed = {f.name for f in fields(cls)}
    for key in overrides:
        if key not in allowed:
            raise TaskConfigError(f"unknown env option {key!r}; allowed: {', '.join(sorted(allowed))}")
    options = cls(**overrides)
    if options.max_episode_steps is not None and options.max_episode_steps < 1:
        raise TaskConfigError(f"max_episode_steps must be >= 1, got {options.max_episode_steps}")
    if options.image_size < 1:
        raise TaskConfigError(f"image_size must be >= 1, got {options.image_size}")
    if options.render_size < 0:
        raise TaskConfigError(f"render_size must be >= 0 (0: no rendering), got {options.render_size}")
    if options.seed_stride < 0:
        raise TaskConfigError(f"seed_stride must be >= 0 (0: num_envs), got {options.seed_stride}")
    return options
