"""Frames of ManiSkill scenes for videos: envs built with ``render_size`` > 0 render their human render camera.

Training envs with state observations are built with ``render_backend='none'`` (no renderer: faster, and no
Vulkan surface per env). An env asked for ``render_size=S`` (``sim_envs.make(task, n, render_size=S)``) is built
with ManiSkill's ``render_mode='rgb_array'`` and its human render camera (the task's third-person view) resized to
``S x S``; its ``render()`` returns uint8 ``[N, S, S, 3]``.

Cost on CPU (Mesa lavapipe, 2 cores), measured: the first frame a process renders takes ~25 s (lavapipe compiles
the render pipelines; later envs of the same process start at once); then ~0.035 s a frame at 64 px and ~0.045 s
at 128 px with the cores moderately busy, 0.1-0.3 s when they are oversubscribed, against ~3 ms for a state step
(the time goes into the camera capture, not the scene update): render only the episodes you want to see.
"""

from __future__ import annotations

import numpy as np

from sim_envs.maniskill.options import translate_simulator_error


def with_render_camera(kwargs: dict, size: int) -> dict:
    """``gym.make`` keyword arguments ``kwargs`` plus what an env that renders ``size x size`` frames needs
    (unchanged when ``size`` is 0)."""
    if not size:
        return kwargs
    kwargs = dict(kwargs, render_mode="rgb_array", human_render_camera_configs=dict(width=size, height=size))
    if kwargs.get("render_backend") == "none":
        del kwargs["render_backend"]  # ManiSkill's default: the GPU renderer, else the CPU one (lavapipe)
    return kwargs


def render_frames(env) -> np.ndarray:
    """The current frame of every sub-env of a ManiSkill gym env: uint8 ``[N, H, W, 3]``."""
    if getattr(env.unwrapped, "render_mode", None) != "rgb_array":
        raise RuntimeError("this env was built without a renderer: make it with render_size > 0 "
                           "(e.g. sim_envs.make(task, n, render_size=128))")
    try:
        frames = env.render()
    except RuntimeError as error:
        raise translate_simulator_error(error) from error
    if hasattr(frames, "detach"):
        frames = frames.detach().cpu().numpy()
    frames = np.asarray(frames)
    if frames.ndim == 3:
        frames = frames[None]
    return np.ascontiguousarray(frames[..., :3]).astype(np.uint8, copy=False)
