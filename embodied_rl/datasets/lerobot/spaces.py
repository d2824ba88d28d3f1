"""What a task's policy observes and does, and whether a LeRobot dataset's features fit it.

A mismatch is a user's to fix (another dataset, another task or control mode): it raises ``ConfigError`` with one
line naming the feature, its shape in the dataset and the shape the task takes (the CLI exits 2 on it).
"""

from __future__ import annotations

from dataclasses import dataclass

from embodied_rl.config.errors import ConfigError
from embodied_rl.datasets.lerobot.layout import ACTION, IMAGES_PREFIX, STATE


@dataclass(frozen=True)
class TaskSpaces:
    """The shapes a task's env gives and takes (as the env workers report them)."""

    task: str
    action_dim: int
    """A: one step's action ``[A]``."""
    state_dim: int
    """D: the state vector ``[D]`` (obs_mode state: the whole observation; rgb: the proprioceptive part)."""
    image_shape: tuple[int, int, int] | None = None
    """``(H, W, 3 * cameras)`` when the policy observes cameras (obs_mode rgb), else None."""

    @classmethod
    def from_policy_spec(cls, task: str, spec: dict) -> "TaskSpaces":
        """From a policy spec (``obs_dim``, ``action_dim`` and, for camera observations, ``obs_shapes``)."""
        shapes = spec.get("obs_shapes") or {}
        rgb = shapes.get("rgb")
        return cls(task, int(spec["action_dim"]), int(spec.get("obs_dim") or 0),
                   tuple(int(n) for n in rgb) if rgb else None)


def camera_keys(features: dict) -> list[str]:
    """The dataset's camera features (``observation.images.<camera>``, or a lone ``observation.image``), in
    ``meta/info.json`` order."""
    keys = [key for key, f in features.items() if key.startswith(IMAGES_PREFIX) and f["dtype"] in ("video", "image")]
    if not keys and features.get("observation.image", {}).get("dtype") in ("video", "image"):
        keys = ["observation.image"]
    return keys


def image_height_width(feature: dict) -> tuple[int, int, int]:
    """``(H, W, C)`` of a camera feature, whether its shape is ``[H, W, C]`` or ``[C, H, W]`` (its ``names``)."""
    shape = [int(n) for n in feature["shape"]]
    names = feature.get("names") or []
    if list(names)[:1] == ["channels"] or (len(shape) == 3 and shape[0] in (1, 3) and shape[2] not in (1, 3)):
        return shape[1], shape[2], shape[0]
    return shape[0], shape[1], shape[2]


def check_features(features: dict, spaces: TaskSpaces, where: str) -> list[str]:
    """Refuse a dataset whose ``features`` do not fit ``spaces``; returns the camera keys to read (none when the
    task observes no cameras). ``where``: what names the dataset in the message (e.g. ``algorithm.demos=DIR``)."""

    def refuse(key: str, dataset_shape, task_shape) -> ConfigError:
        return ConfigError(f"{where}: feature {key!r} is {dataset_shape} in the dataset; task {spaces.task!r} "
                           f"takes {task_shape}")

    action = features.get(ACTION)
    if action is None:
        raise refuse(ACTION, "missing", [spaces.action_dim])
    if [int(n) for n in action["shape"]] != [spaces.action_dim]:
        raise refuse(ACTION, list(action["shape"]), [spaces.action_dim])
    state = features.get(STATE)
    if spaces.state_dim and state is None:
        raise refuse(STATE, "missing", [spaces.state_dim])
    if state is not None and [int(n) for n in state["shape"]] != [spaces.state_dim]:
        raise refuse(STATE, list(state["shape"]), [spaces.state_dim])
    if spaces.image_shape is None:
        return []
    height, width, channels = spaces.image_shape
    cameras = camera_keys(features)
    if not cameras:
        raise refuse(f"{IMAGES_PREFIX}*", "missing", [height, width, channels])
    for key in cameras:
        h, w, c = image_height_width(features[key])
        if (h, w) != (height, width) or c != 3:
            raise refuse(key, [h, w, c], [height, width, 3])
    if 3 * len(cameras) != channels:
        raise refuse(f"{IMAGES_PREFIX}*", f"{len(cameras)} camera(s)", f"{channels // 3} camera(s) [{height}, "
                     f"{width}, 3]")
    return cameras
