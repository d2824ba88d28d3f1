"""``embodied-rl doctor``: can this machine run the simulators (ManiSkill on Vulkan, MetaWorld on MuJoCo's GL,
robosuite) and the runtime? One line per check (PASS or FAIL with
what was seen) and, for each failure, the command or setting that fixes it. Exit code 0 when every check passed,
1 otherwise."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

MIN_FREE_GIB = 5.0
"""Free disk below this where runs write (the working directory) or Ray spills (the temp directory) fails: a
checkpoint of a full-size VLA is 15 GB, Ray's object store spills there, and a full disk corrupts nothing here (writes
are atomic) but stops the run."""
VULKAN_FIX = ("install a Vulkan loader and driver: `bash scripts/install_system_deps.sh` (libvulkan1 and Mesa >= 23 "
              "lavapipe on CPU machines, the NVIDIA driver's ICD on GPU ones); `vulkaninfo --summary` should list a "
              "device")


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str
    fix: str = ""


def check_devices() -> Check:
    import torch

    if not torch.cuda.is_available():
        return Check("devices", True, f"torch {torch.__version__}; no CUDA GPU: runs use the CPU (env.backend=cpu)")
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return Check("devices", True, f"torch {torch.__version__}; {len(names)} CUDA GPU(s): {', '.join(names)}")


def _maniskill(obs_mode: str, what: str) -> Check:
    import sim_envs

    start = time.perf_counter()
    try:
        env = sim_envs.make("maniskill_pushcube", 1, processes=False, obs_mode=obs_mode)
        try:
            obs = env.reset()
        finally:
            env.close()
    except Exception as error:  # the simulator's own errors name the missing piece (e.g. no Vulkan device)
        return Check(what, False, f"ManiSkill3 PushCube-v1 ({obs_mode}) failed: {str(error).splitlines()[0][:200]}",
                     VULKAN_FIX)
    shape = tuple(obs["rgb"].shape) if obs_mode == "rgb" else tuple(getattr(obs, "shape", ()))
    return Check(what, True, f"ManiSkill3 PushCube-v1 ({obs_mode}) resets in {time.perf_counter() - start:.1f} s, "
                             f"observations {shape}")


def check_simulator() -> Check:
    """ManiSkill's physics (state observations)."""
    return _maniskill("state", "simulator")


def check_renderer() -> Check:
    """ManiSkill's camera rendering (SAPIEN on Vulkan), which camera observations and videos need."""
    return _maniskill("rgb", "renderer")


def check_mujoco_renderer() -> Check:
    """MuJoCo's camera rendering (MetaWorld): the GL backend ``MUJOCO_GL`` names, or the first of EGL and OSMesa
    that makes a context here, rendering one MetaWorld camera image."""
    import sim_envs

    start = time.perf_counter()
    try:
        from sim_envs.mujoco_gl import select_gl_backend

        backend = select_gl_backend()
        env = sim_envs.make("metaworld_reach", 1, obs_mode="rgb")
        try:
            image = env.reset()["rgb"]
        finally:
            env.close()
    except Exception as error:  # the adapter's errors are one line with the fix; others name the missing piece
        from sim_envs.mujoco_gl import GL_FIX

        return Check("mujoco renderer", False, f"MetaWorld reach-v3 (rgb) failed: {str(error).splitlines()[0][:240]}",
                     GL_FIX)
    if image.std() < 1.0:
        return Check("mujoco renderer", False, f"MUJOCO_GL={backend} rendered a blank {tuple(image.shape)} image",
                     "set MUJOCO_GL to another backend (egl, osmesa) or run `bash scripts/install_system_deps.sh`")
    return Check("mujoco renderer", True, f"MetaWorld reach-v3 camera image {tuple(image.shape)} with MUJOCO_GL="
                                          f"{backend} in {time.perf_counter() - start:.1f} s")


def check_robosuite() -> Check:
    """robosuite (the third family, on MuJoCo): imports, builds Lift and steps it (``sim_envs/robosuite/health.py``)."""
    from sim_envs.robosuite.health import check_robosuite_steps

    return Check("robosuite", *check_robosuite_steps())


def check_ray() -> Check:
    from embodied_rl.runtime import Cluster

    start = time.perf_counter()
    try:
        with Cluster(num_cpus=1) as cluster:
            slots = cluster.total_cpus()
    except Exception as error:
        return Check("ray", False, f"a local Ray did not start: {str(error).splitlines()[0][:200]}",
                     "reinstall the runtime (`bash install.sh`), and give Ray room: free /dev/shm and the temp "
                     "directory, or set RAY_TMPDIR to a directory on a larger disk")
    return Check("ray", True, f"a local Ray with {slots:.0f} CPU slot(s) started in {time.perf_counter() - start:.1f} s")


def check_disk(min_free_gib: float = MIN_FREE_GIB) -> Check:
    places = {"working directory": Path.cwd(), "temp directory": Path(tempfile.gettempdir())}
    free = {label: shutil.disk_usage(path).free / 2 ** 30 for label, path in places.items()}
    detail = ", ".join(f"{label} {places[label]}: {gib:,.1f} GiB free" for label, gib in free.items())
    short = [label for label, gib in free.items() if gib < min_free_gib]
    if short:
        return Check("disk", False, detail, f"free at least {min_free_gib:g} GiB on the {' and '.join(short)}, or "
                     "run from a directory on a larger disk (and set RAY_TMPDIR there)")
    return Check("disk", True, detail)


CHECKS: tuple[Callable[[], Check], ...] = (check_devices, check_simulator, check_renderer, check_mujoco_renderer,
                                           check_robosuite, check_ray, check_disk)


def run_doctor(checks: tuple[Callable[[], Check], ...] = CHECKS) -> int:
    passed = True
    for check in checks:
        result = check()
        passed &= result.passed
        print(f"{'PASS' if result.passed else 'FAIL'} {result.name}: {result.detail}", flush=True)
        if not result.passed:
            print(f"     fix: {result.fix}", flush=True)
    print("every check passed" if passed else "some checks failed: see each fix above", flush=True)
    return 0 if passed else 1
