"""N MetaWorld envs in the calling process behind the ``VectorEnv`` interface (``sim_envs/in_process.py``)."""

from __future__ import annotations

from sim_envs.in_process import InProcessEnvs
from sim_envs.metaworld.options import MetaWorldOptions
from sim_envs.metaworld.single import SingleMetaWorldEnv


class MetaWorldEnvs(InProcessEnvs):
    """``num_envs`` MetaWorld envs of ``env_id`` (e.g. ``reach-v3``). Env i starts from seed ``options.seed + i``;
    the seed decides the initial state exactly (``single.py``), so envs given one state id start equal."""

    def __init__(self, env_id: str, num_envs: int, options: MetaWorldOptions):
        self.env_id = env_id
        self.options = options
        super().__init__([SingleMetaWorldEnv(env_id, options) for _ in range(num_envs)], options.seed,
                         options.seed_stride)
