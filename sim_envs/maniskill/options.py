"""Validated ManiSkill env options and the checks that run before a simulator is built."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sim_envs.errors import SimulatorUnavailableError, TaskConfigError
from sim_envs.option_checks import build_options

OBS_MODES = ("state", "rgb")
BACKENDS = ("auto", "cpu", "gpu")


@dataclass
class ManiSkillOptions:
    """Options every ManiSkill task accepts as ``sim_envs.make(..., **overrides)``."""

    obs_mode: str = "state"
    """'state' (flat float32 vector) or 'rgb' (uint8 camera image plus the proprioceptive state)."""
    control_mode: str = "pd_joint_delta_pos"
    """A controller of the robot, e.g. pd_joint_delta_pos, pd_ee_delta_pos."""
    reward_mode: str = "normalized_dense"
    max_episode_steps: int | None = None
    """Episode length before truncation; None keeps the task's own."""
    reconfiguration_freq: int = 0
    """Rebuild the scene every this many resets (0: never). 1 is ManiSkill's CPU default and ~60x slower resets."""
    ignore_terminations: bool = False
    """Run every episode to its time limit (evaluation: success_at_end is then meaningful)."""
    backend: str = "auto"
    """'cpu' (one env per process), 'gpu' (batched PhysX GPU), 'auto' (gpu when CUDA is present)."""
    processes: bool = True
    """CPU only: with num_envs > 1, run each env in its own process (True) or all in this process (False)."""
    image_size: int = 64
    """Camera width = height for obs_mode='rgb'."""
    render_size: int = 0
    """Width = height of the frames ``render()`` returns (ManiSkill's human render camera, for videos); 0: no
    renderer (state envs are then built with ``render_backend='none'``). Costs on CPU: sim_envs/maniskill/rendering.py."""
    seed: int = 0
    """Seed of the first episode of env 0; env i starts from seed + i."""
    ood_split: str | None = None
    """An out-of-distribution split applied to every episode: 'vision', 'semantic' or 'execution'
    (sim_envs/maniskill/ood_splits.py; evaluations take it from ``eval.split``); None: the task as it is."""
    seed_stride: int = 0
    """In-process CPU envs: env i's later episodes take seeds seed + i + k * seed_stride (0: num_envs). Env
    workers set it to the run's total env count, so that the seed streams of different workers never meet."""

    @classmethod
    def parse(cls, overrides: dict) -> "ManiSkillOptions":
        options = build_options(cls, overrides)
        if options.obs_mode not in OBS_MODES:
            raise TaskConfigError(f"obs_mode={options.obs_mode!r} is not supported; allowed: {', '.join(OBS_MODES)}")
        if options.backend not in BACKENDS:
            raise TaskConfigError(f"backend={options.backend!r}; allowed: {', '.join(BACKENDS)}")
        return options

    def resolved_backend(self) -> str:
        if self.backend != "auto":
            return self.backend
        import torch

        return "gpu" if torch.cuda.is_available() else "cpu"


def quiet_maniskill() -> None:
    """Keep ManiSkill from prompting on stdin and from warning about the missing CUDA renderer."""
    os.environ.setdefault("MS_SKIP_ASSET_DOWNLOAD_PROMPT", "1")
    import logging
    import warnings

    for name in ("mani_skill", "mani_skill "):  # ManiSkill 3.0.1 names its logger with a trailing space
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="mani_skill")
    warnings.filterwarnings("ignore", module="gymnasium")


def check_assets(env_id: str) -> None:
    """Raise one clear line if ``env_id`` needs assets that are not on disk (never prompt, never download)."""
    from mani_skill.utils.assets import data

    if env_id not in data.DATA_GROUPS:
        return
    missing = [s for s in data.expand_data_group_into_individual_data_source_ids(env_id)
               if not data.is_data_source_downloaded(s)]
    if missing:
        raise TaskConfigError(
            f"task {env_id} needs assets that are not installed ({', '.join(sorted(missing)[:3])}"
            f"{'...' if len(missing) > 3 else ''}); download them with "
            f"`python -m mani_skill.utils.download_asset {env_id}` on a machine with network access")


def translate_simulator_error(error: Exception) -> Exception:
    """Turn SAPIEN's Vulkan failures into a SimulatorUnavailableError with the fix; others pass through."""
    text = str(error).lower()
    if "vulkan" in text or "vk::" in text or "render device" in text or "rendering device" in text:
        return SimulatorUnavailableError(
            "no usable Vulkan device for ManiSkill/SAPIEN: run `bash scripts/install_system_deps.sh` "
            "(Mesa >= 23 lavapipe on CPU machines, or an NVIDIA driver)")
    return error
