"""Camera images of a MuJoCo scene, through Gymnasium's off-screen MuJoCo renderer.

The GL backend is MuJoCo's ``MUJOCO_GL`` (chosen by ``sim_envs.mujoco_gl.select_gl_backend`` before the first
context). MetaWorld's cameras are mounted so that the rendered rows come out upside down; ``capture`` returns the
image upright. Cost on a 2-core CPU with Mesa's software EGL (llvmpipe), measured: ~0.09 s a 64x64 frame, against
~0.3 ms a physics step: render only the steps a policy looks at (``observe=False`` skips).
"""

from __future__ import annotations

import numpy as np

from sim_envs.errors import SimulatorUnavailableError
from sim_envs.mujoco_gl import GL_FIX


class MujocoCamera:
    """Renders ``size x size`` RGB frames of ``env`` (a MuJoCo env: ``model``, ``data``) from camera ``name``."""

    def __init__(self, env, size: int, name: str):
        from gymnasium.envs.mujoco.mujoco_rendering import MujocoRenderer

        self.renderer = MujocoRenderer(env.model, env.data, width=size, height=size, camera_name=name,
                                       max_geom=1000)
        self.size = size

    def capture(self) -> np.ndarray:
        """The current frame: uint8 ``[size, size, 3]``, upright."""
        try:
            frame = self.renderer.render("rgb_array")
        except Exception as error:  # GL context failures come as bare exceptions from PyOpenGL / MuJoCo
            raise SimulatorUnavailableError(f"MuJoCo could not render a camera image "
                                            f"({str(error).splitlines()[0][:160]}); {GL_FIX}") from error
        return np.ascontiguousarray(np.asarray(frame, np.uint8)[::-1, :, :3])

    def close(self) -> None:
        self.renderer.close()
