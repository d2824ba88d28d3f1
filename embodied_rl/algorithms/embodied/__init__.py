"""Embodied RL algorithms, chosen by ``algorithm.name`` from ``ALGORITHMS``.

An algorithm is pure (no optimizer, device or process): it turns a collected batch into training samples
(``select`` / ``prepare``) and minibatch outputs of the policy into a loss (``loss``). The actor worker owns the
optimizer, the minibatch loop and gradient clipping, and calls whichever algorithm the config names.
"""

from embodied_rl.algorithms.embodied.base import (ALGORITHMS, Algorithm, Needs, OptimizerConfig, UpdateConfig,
                                                 algorithm_config_class, algorithm_needs)
from embodied_rl.algorithms.embodied import ppo as _ppo  # noqa: F401  (registers "ppo")
from embodied_rl.algorithms.embodied import grpo as _grpo  # noqa: F401  (registers the GRPO family)
from embodied_rl.algorithms.embodied import sft as _sft  # noqa: F401  (registers "sft")
from embodied_rl.algorithms.embodied import sac as _sac  # noqa: F401  (registers "sac", "rlpd")

__all__ = ["ALGORITHMS", "Algorithm", "Needs", "OptimizerConfig", "UpdateConfig", "algorithm_config_class",
           "algorithm_needs"]
