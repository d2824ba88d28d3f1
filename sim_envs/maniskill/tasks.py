"""ManiSkill3 tasks in the registry. Each task is one decorated function.

These are built-in tasks (``builtin=True``): each has a recipe ``embodied_rl/configs/<task>.yaml``. Each states
its instruction, which camera observations carry as ``obs["instruction"]`` (sim_envs/instructions.py); the colours
named are ManiSkill's (PickCube's green goal marker is hidden from the cameras, so its instruction does not name it).
"""

from __future__ import annotations

from sim_envs.errors import TaskConfigError
from sim_envs.families import SimulatorFamily, register_family
from sim_envs.maniskill.ood_splits import check_split
from sim_envs.maniskill.options import ManiSkillOptions
from sim_envs.registry import register_task

register_family(SimulatorFamily(
    "maniskill", demos="sim_envs.maniskill.demos",
    reference_vector_envs={"async_vector_env": "sim_envs.maniskill.processes:reference_async_vector_env"}))


def make_maniskill(env_id: str, num_envs: int, **overrides):
    """The vector env for ``env_id``: batched GPU sim, one process per env, or envs in this process."""
    options = ManiSkillOptions.parse(overrides)
    check_split(options.ood_split, env_id)
    backend = options.resolved_backend()
    if backend == "gpu":
        from sim_envs.maniskill.gpu import GpuManiSkillEnvs

        if options.ood_split is not None:
            raise TaskConfigError(f"ood_split={options.ood_split!r} runs on the CPU simulator only (backend=cpu); "
                                  "the batched GPU sim has no per-env variations yet")
        return GpuManiSkillEnvs(env_id, num_envs, options)
    if num_envs > 1 and options.processes:
        from sim_envs.maniskill.processes import ProcessManiSkillEnvs

        return ProcessManiSkillEnvs(env_id, num_envs, options)
    from sim_envs.maniskill.in_process import InProcessManiSkillEnvs

    return InProcessManiSkillEnvs(env_id, num_envs, options)


@register_task("maniskill_pushcube", "Push a cube onto a goal region (Panda)", "maniskill", "PushCube-v1",
               builtin=True, instruction="push the blue cube onto the red and white target",
               ood_instruction="slide the block until it sits on the round target")
def pushcube(num_envs: int, **overrides):
    return make_maniskill("PushCube-v1", num_envs, **overrides)


@register_task("maniskill_pickcube", "Pick up a cube and move it to a goal position (Panda)", "maniskill",
               "PickCube-v1", builtin=True, instruction="pick up the red cube and move it to the goal position",
               ood_instruction="grasp the block and carry it to the point in the air")
def pickcube(num_envs: int, **overrides):
    return make_maniskill("PickCube-v1", num_envs, **overrides)


@register_task("maniskill_stackcube", "Stack a red cube on a green cube (Panda)", "maniskill", "StackCube-v1",
               builtin=True, instruction="stack the red cube on the green cube",
               ood_instruction="put the red block on top of the green block")
def stackcube(num_envs: int, **overrides):
    return make_maniskill("StackCube-v1", num_envs, **overrides)


@register_task("maniskill_pullcube", "Pull a cube back to a goal region (Panda)", "maniskill", "PullCube-v1",
               builtin=True, instruction="pull the blue cube back onto the red and white target",
               ood_instruction="drag the block towards you onto the round target")
def pullcube(num_envs: int, **overrides):
    return make_maniskill("PullCube-v1", num_envs, **overrides)


@register_task("maniskill_peginsertionside", "Insert a peg into a hole from the side (Panda)", "maniskill",
               "PegInsertionSide-v1", builtin=True, instruction="insert the peg into the hole from the side",
               ood_instruction="push the stick sideways into the opening of the box")
def peginsertionside(num_envs: int, **overrides):
    return make_maniskill("PegInsertionSide-v1", num_envs, **overrides)


@register_task("maniskill_picksingleycb", "Pick up a YCB object (needs the ycb asset download)", "maniskill",
               "PickSingleYCB-v1", builtin=True, instruction="pick up the object and move it to the goal position")
def picksingleycb(num_envs: int, **overrides):
    return make_maniskill("PickSingleYCB-v1", num_envs, **overrides)
