"""A task's demonstrations as a LeRobot dataset: what the task knows that the episodes do not (fps, camera names,
instruction), filled in from the task's registry entry and simulator family."""

from __future__ import annotations

from pathlib import Path

from embodied_rl.datasets.lerobot.writer import WriteResult, write_lerobot_dataset
from embodied_rl.demos.dataset import DemoDataset

FAMILY_FPS = {"maniskill": 20, "metaworld": 80}
"""Control steps per second of each family's envs: ManiSkill's default ``control_freq`` (20 Hz; PickCube, PushCube
and StackCube keep it) and MetaWorld's (5 MuJoCo steps of 2.5 ms: its ``render_fps`` 80)."""
FAMILY_CAMERAS = {"maniskill": ("base_camera",), "metaworld": ("corner",)}
"""The camera(s) behind each family's rgb observations (ManiSkill's tabletop tasks: their one ``base_camera``;
MetaWorld: the default ``camera`` option)."""
DEFAULT_FPS = 20


def task_fps(task: str) -> int:
    """The fps of ``task``'s episodes (its family's control rate; ``DEFAULT_FPS`` for other families)."""
    import sim_envs

    return FAMILY_FPS.get(sim_envs.get_task(task).simulator, DEFAULT_FPS)


def task_camera_names(task: str, cameras: int) -> list[str]:
    """Names of the ``cameras`` cameras of ``task``'s rgb observations (``camera_<i>`` where unknown)."""
    import sim_envs

    known = FAMILY_CAMERAS.get(sim_envs.get_task(task).simulator, ())
    return list(known) if len(known) == cameras else [f"camera_{i}" for i in range(cameras)]


def task_instruction(task: str) -> str:
    """The words of ``task``: its instruction (what a language policy is given), else its description, else its
    name."""
    import sim_envs

    entry = sim_envs.get_task(task)
    return entry.instruction or entry.description or task


def write_task_dataset(demos: DemoDataset, task: str, out: str | Path, fps: int | None = None,
                       image_storage: str = "video") -> WriteResult:
    """Write ``demos`` of ``task`` as a LeRobot dataset at ``out`` (new or empty): every episode's task text is the
    task's instruction, cameras are named after the family's, fps is the family's unless given."""
    cameras = 0 if demos.rgb is None else demos.rgb.shape[-1] // 3
    return write_lerobot_dataset(demos, out, fps or task_fps(task), task_instruction(task),
                                 camera_names=task_camera_names(task, cameras) if cameras else None,
                                 image_storage=image_storage)
