"""N ManiSkill CPU envs stepped one after another in the calling process (an env worker holds these)."""

from __future__ import annotations

from sim_envs.in_process import InProcessEnvs
from sim_envs.maniskill.options import ManiSkillOptions
from sim_envs.maniskill.rewards import single_env


class InProcessManiSkillEnvs(InProcessEnvs):
    """``num_envs`` single-scene CPU envs in this process, behind the ``VectorEnv`` interface."""

    def __init__(self, env_id: str, num_envs: int, options: ManiSkillOptions):
        self.env_id = env_id
        self.options = options
        super().__init__([single_env(env_id, options) for _ in range(num_envs)], options.seed, options.seed_stride)
