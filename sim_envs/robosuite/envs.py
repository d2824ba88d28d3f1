"""N robosuite envs in the calling process behind the ``VectorEnv`` interface (``sim_envs/in_process.py``)."""

from __future__ import annotations

from sim_envs.in_process import InProcessEnvs
from sim_envs.robosuite.options import RobosuiteOptions
from sim_envs.robosuite.single import SingleRobosuiteEnv


class RobosuiteEnvs(InProcessEnvs):
    """``num_envs`` robosuite envs of ``env_id`` (e.g. ``Lift``). Env i starts from seed ``options.seed + i``; the
    seed decides the initial state exactly (``single.py``), so envs given one state id start equal."""

    def __init__(self, env_id: str, num_envs: int, options: RobosuiteOptions):
        self.env_id = env_id
        self.options = options
        super().__init__([SingleRobosuiteEnv(env_id, options) for _ in range(num_envs)], options.seed,
                         options.seed_stride)
