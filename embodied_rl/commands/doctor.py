"""``embodied-rl doctor``: can this machine run the simulator and the runtime?"""

from __future__ import annotations

import time


def run_doctor() -> int:
    import torch

    import sim_envs

    print(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}")
    start = time.perf_counter()
    try:
        env = sim_envs.make("maniskill_pushcube", 1, processes=False)
        env.reset()
        env.close()
    except sim_envs.TaskConfigError as error:
        print(f"simulator: FAILED: {error}")
        return 2
    print(f"simulator: ManiSkill3 PushCube-v1 starts ({time.perf_counter() - start:.1f} s)")
    from embodied_rl.runtime import Cluster

    start = time.perf_counter()
    with Cluster(num_cpus=1) as cluster:
        print(f"runtime: local Ray with {cluster.total_cpus():.0f} CPU slot(s) started "
              f"({time.perf_counter() - start:.1f} s)")
    return 0
