"""Register your own task with one decorated function, then train it from Python.

    python examples/custom_task.py
"""

import sim_envs
from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied_ppo import EmbodiedPPORunner
from sim_envs import register_task
from sim_envs.maniskill.tasks import make_maniskill


@register_task("pushcube_short", "PushCube with 25-step episodes", "maniskill", "PushCube-v1")
def pushcube_short(num_envs: int, **overrides):
    overrides.setdefault("max_episode_steps", 25)
    return make_maniskill("PushCube-v1", num_envs, **overrides)


if __name__ == "__main__":
    print(sim_envs.list_tasks())
    config = load_train_config("pushcube_short", None, ["total_env_steps=4000", "env.num_workers=2",
                                                        "rollout.steps_per_iteration=25"])
    print(EmbodiedPPORunner(config, "runs/pushcube_short").run())
