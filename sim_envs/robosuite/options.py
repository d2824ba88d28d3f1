"""Validated robosuite env options (``sim_envs.make("robosuite_<task>", n, **overrides)``).

The keys are the ones every simulator family takes from a run's ``env`` section (``embodied_rl/runners/setup.py``
``env_options``), with robosuite's meanings, plus ``robot`` and ``kwargs``; a value robosuite cannot honour is refused
in one line (``TaskConfigError``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim_envs.errors import TaskConfigError
from sim_envs.option_checks import build_options

OBS_MODES = ("state", "rgb")
CONTROL_MODES = ("osc_pose", "osc_position", "joint_position", "joint_torque", "ik_pose")
"""robosuite's arm controllers (``robosuite.ALL_PART_CONTROLLERS``, lower-cased), each with its gripper's one-dim
grip command last. ``osc_pose`` (the default: the Panda's default controller in robosuite 1.5 and the one its
benchmark uses): ``[dx, dy, dz, dax, day, daz, grip]`` in [-1, 1], 5 cm and 0.5 rad per unit, in the robot's base
frame. ``joint_velocity`` is left out: robosuite 1.5.2's ``JointVelocityController`` fails to construct."""
REWARD_MODES = ("normalized_dense", "dense", "sparse")
BACKENDS = ("auto", "cpu")
ROBOTS = ("Panda", "Sawyer", "IIWA", "Jaco", "Kinova3", "UR5e")
"""Single arms robosuite 1.5.2 ships models of (without the separate ``robosuite_models`` package)."""
DEFAULT_MAX_EPISODE_STEPS = 500
"""robosuite's benchmark horizon (its ``horizon`` default is 1000; its published SAC runs use 500)."""
OWN_KWARGS = ("robots", "controller_configs", "horizon", "ignore_done", "hard_reset", "reward_shaping", "reward_scale",
              "has_renderer", "has_offscreen_renderer", "use_camera_obs", "use_object_obs", "seed")
"""``robosuite.make`` keywords set from the options above; ``kwargs`` may not name them."""


@dataclass
class RobosuiteOptions:
    """Options every robosuite task accepts as ``sim_envs.make(..., **overrides)``."""

    obs_mode: str = "state"
    """'state': float32 ``[D]``, robosuite's ``object-state`` then ``robot0_proprio-state`` (the order of its own
    ``GymWrapper``; Lift D = 10 + 50 with the Panda) or 'rgb': ``{"rgb": uint8 [H, W, 3], "state": float32 [D]}``."""
    control_mode: str = "osc_pose"
    """The arm's controller (see ``CONTROL_MODES``)."""
    reward_mode: str = "normalized_dense"
    """'normalized_dense': robosuite's shaped reward at ``reward_scale=1`` (its benchmark setting: at most 1 a step);
    'dense': the shaped reward unscaled (``reward_scale=None``; Lift at most 2.25); 'sparse': robosuite's sparse reward
    (1 at a success step, else 0)."""
    max_episode_steps: int | None = None
    """Episode length before truncation; None: 500 (robosuite's benchmark horizon)."""
    ignore_terminations: bool = False
    """Run every episode to its time limit (robosuite's own behaviour). Otherwise an episode ends (terminated) at its
    first success step, as ManiSkill's and MetaWorld's tasks do here."""
    backend: str = "auto"
    """MuJoCo runs on the CPU: 'auto' and 'cpu' mean the same; 'gpu' is refused."""
    processes: bool = False
    """Accepted for the family-wide interface; robosuite envs always run in the calling process."""
    image_size: int = 64
    """Camera width = height for obs_mode='rgb'."""
    camera: str = "agentview"
    """The camera of rgb observations and of ``render()`` (robosuite's ``agentview`` by default; the scenes also have
    ``frontview``, ``birdview``, ``sideview``, ``robot0_robotview``, ``robot0_eye_in_hand``)."""
    render_size: int = 0
    """Width = height of the frames ``render()`` returns (videos); 0: rgb envs render at ``image_size``, state envs
    do not render."""
    reconfiguration_freq: int = 0
    """Accepted for the family-wide interface. The scene is built once (``hard_reset=False``): a reset re-samples
    object placements and the arm's initial noise, not object sizes (fixed by the scene's construction seed)."""
    seed: int = 0
    """Seed of the first episode of env 0; env i starts from seed + i."""
    seed_stride: int = 0
    """Env i's later episodes take seeds seed + i + k * seed_stride (0: num_envs); see the ManiSkill option."""
    robot: str = "Panda"
    """The arm (see ``ROBOTS``)."""
    kwargs: dict = field(default_factory=dict)
    """Further ``robosuite.make`` keywords of the task (e.g. ``{"use_latch": False}`` for Door); not those in
    ``OWN_KWARGS``."""

    @classmethod
    def parse(cls, overrides: dict) -> "RobosuiteOptions":
        options = build_options(cls, overrides)
        _one_of("obs_mode", options.obs_mode, OBS_MODES)
        _one_of("control_mode", options.control_mode, CONTROL_MODES)
        _one_of("reward_mode", options.reward_mode, REWARD_MODES)
        _one_of("backend", options.backend, BACKENDS)
        _one_of("robot", options.robot, ROBOTS)
        if options.processes:
            raise TaskConfigError("processes=True is not supported for robosuite tasks; allowed: False (envs run in "
                                  "the calling process)")
        if not isinstance(options.kwargs, dict):
            raise TaskConfigError(f"kwargs must be a mapping of robosuite.make keywords, got {options.kwargs!r}")
        taken = sorted(set(options.kwargs) & set(OWN_KWARGS))
        if taken:
            raise TaskConfigError(f"kwargs.{taken[0]} is set by the robosuite adapter; use its option instead "
                                  "(obs_mode, control_mode, reward_mode, max_episode_steps, robot, seed)")
        return options

    @property
    def time_limit(self) -> int:
        return self.max_episode_steps or DEFAULT_MAX_EPISODE_STEPS

    @property
    def renders(self) -> bool:
        return self.obs_mode == "rgb" or self.render_size > 0


def _one_of(key: str, value, allowed: tuple) -> None:
    if value not in allowed:
        raise TaskConfigError(f"{key}={value!r} is not supported for robosuite tasks; allowed: {', '.join(allowed)}")
