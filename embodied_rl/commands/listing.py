"""``embodied-rl tasks``: the registered tasks, one per line."""

from __future__ import annotations


def run_tasks() -> int:
    import sim_envs

    from sim_envs.registry import list_task_prefixes

    for name in sim_envs.list_tasks():
        entry = sim_envs.get_task(name)
        print(f"{name:<30} {entry.env_id or '':<22} {entry.description}")
    for prefix in list_task_prefixes():
        print(f"{prefix + '<id>':<30} {'':<22} resolved on first use, e.g. gym:CartPole-v1 (any registered Gymnasium env)")
    return 0
