"""Validated options of ``gym:<id>`` tasks (``sim_envs.make("gym:CartPole-v1", n, **overrides)``).

The keys every simulator family takes from a run's ``env`` section (``embodied_rl/runners/setup.py``
``env_options``), with Gymnasium's meanings, plus ``kwargs`` for ``gymnasium.make``; a value a Gymnasium env cannot
honour is refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim_envs.errors import TaskConfigError
from sim_envs.option_checks import build_options

OBS_MODES = ("state",)
CONTROL_MODES = ("default",)
"""The env's own action space (see ``spaces.py`` for how it is offered)."""
REWARD_MODES = ("dense", "sparse")
BACKENDS = ("auto", "cpu")


@dataclass
class GymnasiumOptions:
    obs_mode: str = "state"
    """'state': the env's Box (flattened) or Discrete (one-hot) observation."""
    control_mode: str = "default"
    reward_mode: str = "dense"
    """'dense': the env's own reward; 'sparse': 1 at a step where ``info["is_success"]`` is true, else 0."""
    max_episode_steps: int | None = None
    """None: the env's registered time limit (``gymnasium.spec(id).max_episode_steps``)."""
    ignore_terminations: bool = False
    """Accepted for the family-wide interface; a Gymnasium env's termination (CartPole's pole falling) is part of
    its dynamics and always ends the episode."""
    backend: str = "auto"
    processes: bool = False
    """Gymnasium envs run in the calling process (env workers give parallelism)."""
    image_size: int = 64
    """Unused (state observations only)."""
    render_size: int = 0
    """> 0: build the env with ``render_mode='rgb_array'`` for videos (frames at the env's own size)."""
    reconfiguration_freq: int = 0
    seed: int = 0
    """Seed of the first episode of env 0; env i starts from seed + i."""
    seed_stride: int = 0
    """Env i's later episodes take seeds seed + i + k * seed_stride (0: num_envs)."""
    kwargs: dict = field(default_factory=dict)
    """Keyword arguments of ``gymnasium.make(id, **kwargs)`` (``env.kwargs.*`` in a run's config)."""

    @classmethod
    def parse(cls, overrides: dict) -> "GymnasiumOptions":
        options = build_options(cls, overrides)
        for key, allowed in (("obs_mode", OBS_MODES), ("control_mode", CONTROL_MODES),
                             ("reward_mode", REWARD_MODES), ("backend", BACKENDS)):
            if getattr(options, key) not in allowed:
                raise TaskConfigError(f"env.{key}={getattr(options, key)!r} is not supported for gym: tasks; "
                                      f"allowed: {', '.join(allowed)}")
        if not isinstance(options.kwargs, dict):
            raise TaskConfigError(f"env.kwargs={options.kwargs!r}: expected a mapping of gymnasium.make keywords")
        if options.processes:
            raise TaskConfigError("processes=True is not supported for gym: tasks; allowed: False (envs run in the "
                                  "calling process)")
        return options
