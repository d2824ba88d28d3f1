"""Validated MetaWorld env options (``sim_envs.make("metaworld_<task>", n, **overrides)``).

The keys are the ones every simulator family takes from a run's ``env`` section (``embodied_rl/runners/setup.py``
``env_options``), with MetaWorld's meanings; a value MetaWorld cannot honour is refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim_envs.errors import TaskConfigError
from sim_envs.option_checks import build_options

OBS_MODES = ("state", "rgb")
CONTROL_MODES = ("ee_delta_pos",)
"""MetaWorld's one controller: ``[dx, dy, dz, grip]`` in [-1, 1], a mocap displacement of 1 cm per unit and the
gripper's effort (MetaWorld's ``action_scale`` 1/100)."""
REWARD_MODES = ("normalized_dense", "dense", "sparse")
BACKENDS = ("auto", "cpu")
DEFAULT_MAX_EPISODE_STEPS = 500
"""MetaWorld's ``max_path_length``: the time limit of every task (its benchmarks truncate there)."""
CAMERAS = ("corner", "corner2", "corner3", "corner4", "topview", "behindGripper", "gripperPOV")
"""The cameras of MetaWorld's Sawyer scenes."""


@dataclass
class MetaWorldOptions:
    """Options every MetaWorld task accepts as ``sim_envs.make(..., **overrides)``."""

    obs_mode: str = "state"
    """'state' (MetaWorld's 39-dim vector: hand, gripper, objects, the same one step earlier, goal) or 'rgb'
    (``{"rgb": uint8 [H, W, 3], "state": float32 [39]}``: a camera image plus the same vector)."""
    control_mode: str = "ee_delta_pos"
    """The only controller MetaWorld has (see ``CONTROL_MODES``)."""
    reward_mode: str = "normalized_dense"
    """'dense': MetaWorld's v2 reward in [0, 10]; 'normalized_dense': the same divided by 10 (in [0, 1], as
    ManiSkill's normalized_dense); 'sparse': 1 at a success step, else 0."""
    max_episode_steps: int | None = None
    """Episode length before truncation; None: MetaWorld's own ``max_path_length`` (500)."""
    ignore_terminations: bool = False
    """Run every episode to its time limit. Otherwise an episode ends (terminated) at its first success step, as
    ManiSkill's tasks do and as MetaWorld's ``terminate_on_success`` does."""
    backend: str = "auto"
    """MuJoCo runs on the CPU: 'auto' and 'cpu' mean the same; 'gpu' is refused."""
    processes: bool = False
    """Accepted for the family-wide interface; MetaWorld envs always run in the calling process (a step costs
    ~0.3 ms: a process per env would spend more on messages than on physics). Env workers give parallelism."""
    image_size: int = 64
    """Camera width = height for obs_mode='rgb'."""
    camera: str = "corner"
    """The camera of rgb observations and of ``render()``."""
    render_size: int = 0
    """Width = height of the frames ``render()`` returns (videos); 0: rgb envs render at ``image_size``, state envs
    do not render."""
    reconfiguration_freq: int = 0
    """Accepted for the family-wide interface; a MuJoCo scene is never rebuilt (a reset only moves bodies)."""
    seed: int = 0
    """Seed of the first episode of env 0; env i starts from seed + i."""
    seed_stride: int = 0
    """Env i's later episodes take seeds seed + i + k * seed_stride (0: num_envs); see the ManiSkill option."""

    @classmethod
    def parse(cls, overrides: dict) -> "MetaWorldOptions":
        options = build_options(cls, overrides)
        _one_of("obs_mode", options.obs_mode, OBS_MODES)
        _one_of("control_mode", options.control_mode, CONTROL_MODES)
        _one_of("reward_mode", options.reward_mode, REWARD_MODES)
        _one_of("backend", options.backend, BACKENDS)
        _one_of("camera", options.camera, CAMERAS)
        if options.processes:
            raise TaskConfigError("processes=True is not supported for MetaWorld tasks; allowed: False (envs run in "
                                  "the calling process)")
        return options

    @property
    def time_limit(self) -> int:
        return self.max_episode_steps or DEFAULT_MAX_EPISODE_STEPS

    @property
    def renders(self) -> bool:
        return self.obs_mode == "rgb" or self.render_size > 0


def _one_of(key: str, value, allowed: tuple) -> None:
    if value not in allowed:
        raise TaskConfigError(f"{key}={value!r} is not supported for MetaWorld tasks; allowed: {', '.join(allowed)}")
