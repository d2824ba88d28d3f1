"""N Gymnasium envs in the calling process behind the ``VectorEnv`` interface (``sim_envs/in_process.py``)."""

from __future__ import annotations

from sim_envs.gymnasium_envs.options import GymnasiumOptions
from sim_envs.gymnasium_envs.single import SingleGymnasiumEnv
from sim_envs.in_process import InProcessEnvs


class GymnasiumEnvs(InProcessEnvs):
    """``num_envs`` envs of ``env_id``; env i starts from seed ``options.seed + i``."""

    def __init__(self, env_id: str, num_envs: int, options: GymnasiumOptions):
        self.env_id = env_id
        self.options = options
        super().__init__([SingleGymnasiumEnv(env_id, options) for _ in range(num_envs)], options.seed,
                         options.seed_stride)
