"""Can this machine run robosuite? One check for ``embodied-rl doctor``: robosuite imports, builds ``Lift`` and steps
it (state observations: MuJoCo physics and robosuite's controllers, no GL)."""

from __future__ import annotations

import time

import numpy as np

INSTALL_FIX = "install robosuite beside the project: `pip install robosuite==1.5.2` (or `bash install.sh`)"
STEPS = 20


def check_robosuite_steps() -> tuple[bool, str, str]:
    """``(passed, what was seen, the fix)`` of building robosuite's Lift and stepping it ``STEPS`` times."""
    import sim_envs

    start = time.perf_counter()
    try:
        env = sim_envs.make("robosuite_lift", 1)
        try:
            obs = env.reset()
            built = time.perf_counter()
            for _ in range(STEPS):
                batch = env.step(np.zeros((1, *env.single_action_shape), np.float32))
        finally:
            env.close()
    except Exception as error:  # the adapter's errors are one line with the fix; others name the missing piece
        message = str(error).splitlines()[0][:240] if str(error) else type(error).__name__
        return False, f"robosuite Lift (state) failed: {message}", INSTALL_FIX
    rate = STEPS / (time.perf_counter() - built)
    if not np.isfinite(batch.obs).all():
        return False, f"robosuite Lift stepped to non-finite observations {batch.obs.shape}", INSTALL_FIX
    return True, (f"robosuite Lift builds and resets in {built - start:.1f} s, observations {tuple(obs.shape)}, "
                  f"{rate:.0f} steps/s"), ""
