"""``embodied-rl tasks``: the registered tasks, one per line."""

from __future__ import annotations


def run_tasks() -> int:
    import sim_envs

    for name in sim_envs.list_tasks():
        entry = sim_envs.get_task(name)
        print(f"{name:<30} {entry.env_id or '':<22} {entry.description}")
    return 0
