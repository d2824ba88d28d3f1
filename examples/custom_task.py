"""Register your own task with one decorated function, then train and evaluate it from Python.

    python examples/custom_task.py [key=value ...]

Extra ``key=value`` arguments override the config (e.g. ``total_env_steps=200`` for a quick run). The env workers
are separate processes that never run this script: they receive the task's registry entry, and with it the
factory below. A task you register yourself has no recipe: it starts from the schema defaults
(``embodied_rl/config/schema.py``), then these overrides.
"""

import json
import sys
import time
from pathlib import Path

import sim_envs
from embodied_rl.commands.evaluate import evaluate_checkpoint
from embodied_rl.commands.preflight import check_task_starts
from embodied_rl.config import load_train_config
from embodied_rl.runners.embodied import EmbodiedRunner
from sim_envs import register_task
from sim_envs.maniskill.tasks import make_maniskill


@register_task("pushcube_short", "PushCube with 25-step episodes", "maniskill", "PushCube-v1")
def pushcube_short(num_envs: int, **overrides):
    if overrides.get("max_episode_steps") is None:  # the trainer passes None for "the task's own time limit"
        overrides["max_episode_steps"] = 25
    return make_maniskill("PushCube-v1", num_envs, **overrides)


if __name__ == "__main__":
    print(sim_envs.list_tasks())
    config = load_train_config("pushcube_short", None, ["total_env_steps=4000", "env.num_workers=2",
                                                        "rollout.steps_per_iteration=25", *sys.argv[1:]])
    check_task_starts(config)
    run_dir = Path(config.run_dir or Path(config.runs_root) / f"pushcube_short-{time.strftime('%Y%m%d-%H%M%S')}")
    final_eval = EmbodiedRunner(config, run_dir).run()
    checkpoint_eval = evaluate_checkpoint(run_dir, episodes=config.eval.num_episodes)  # the latest checkpoint
    print(json.dumps({"run_dir": str(run_dir), "final_eval": final_eval, "checkpoint_eval": checkpoint_eval}))
