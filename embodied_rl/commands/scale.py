"""``embodied-rl scale RUN_DIR env=N rollout=M``: resize the env and rollout worker groups of a live run.

The run applies the request between iterations, logs ``scale/...`` metrics with that iteration, and removes the
request file; ``embodied_rl.runners.scale_requests.request_scale`` is the same from Python.
"""

from __future__ import annotations

from embodied_rl.runners.scale_requests import parse_sizes, request_scale


def run_scale(run_dir: str, assignments: list[str]) -> int:
    sizes = parse_sizes(assignments)
    path = request_scale(run_dir, **sizes)
    wanted = " ".join(f"{k}={v}" for k, v in sizes.items())
    print(f"requested {wanted}: {path} (applied after the run's current iteration)")
    return 0
