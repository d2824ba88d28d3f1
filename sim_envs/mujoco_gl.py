"""Choosing MuJoCo's OpenGL backend for headless rendering (``MUJOCO_GL``).

MuJoCo renders camera images through an OpenGL context: ``egl`` (a GPU's EGL, or Mesa's software EGL on a CPU
machine), ``osmesa`` (Mesa's off-screen software renderer) or ``glfw`` (a window: needs a display). The choice is
read from ``MUJOCO_GL`` when the first context is made, and PyOpenGL fixes its platform at its first import, so it
must be made before anything renders in the process.

``select_gl_backend()`` keeps a ``MUJOCO_GL`` the user set (checked against the known names); otherwise it tries
``egl`` then ``osmesa`` in a short child process (a failed GL start can leave a process unable to try another) and
sets ``MUJOCO_GL`` (and ``PYOPENGL_PLATFORM``) in ``os.environ``, so that processes started later inherit the choice
and do not probe again. When none works it raises ``SimulatorUnavailableError`` with the fix.

State-only envs never render and never call it.
"""

from __future__ import annotations

import os
import subprocess
import sys

from sim_envs.errors import SimulatorUnavailableError, TaskConfigError

BACKENDS = ("egl", "osmesa", "glfw")
"""The values MuJoCo's ``MUJOCO_GL`` takes."""
HEADLESS_ORDER = ("egl", "osmesa")
"""Tried in this order when ``MUJOCO_GL`` is unset: EGL uses a GPU where there is one (else Mesa's llvmpipe)."""
GL_FIX = ("install an OpenGL for headless MuJoCo: `bash scripts/install_system_deps.sh` (Debian packages libegl1 and "
          "libgl1-mesa-dri for EGL, libosmesa6 for OSMesa), or set MUJOCO_GL to a backend that works here "
          "(egl, osmesa)")

_PROBE = """
import os, sys
os.environ["MUJOCO_GL"] = sys.argv[1]
os.environ["PYOPENGL_PLATFORM"] = sys.argv[1]
import mujoco
context = mujoco.GLContext(16, 16)
context.make_current()
context.free()
"""


def probe_backend(backend: str, timeout_s: float = 60.0) -> str | None:
    """None when MuJoCo makes a GL context with ``backend`` in a child process, else the error's last line."""
    env = dict(os.environ, MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend)
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, backend], env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"no GL context within {timeout_s:.0f} s"
    if done.returncode == 0:
        return None
    lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else f"exit code {done.returncode}"


def select_gl_backend() -> str:
    """The backend MuJoCo renders with in this process (and its children); see the module docstring."""
    chosen = os.environ.get("MUJOCO_GL", "").strip().lower()
    if chosen:
        if chosen not in BACKENDS:
            raise TaskConfigError(f"MUJOCO_GL={chosen!r} is not a MuJoCo GL backend; allowed: {', '.join(BACKENDS)}")
        if chosen != "glfw":
            os.environ.setdefault("PYOPENGL_PLATFORM", chosen)
        return chosen
    failures = []
    for backend in HEADLESS_ORDER:
        error = probe_backend(backend)
        if error is None:
            os.environ["MUJOCO_GL"] = backend
            os.environ["PYOPENGL_PLATFORM"] = backend
            return backend
        failures.append(f"{backend}: {error}")
    raise SimulatorUnavailableError(f"MuJoCo cannot render here ({'; '.join(failures)}); {GL_FIX}")
