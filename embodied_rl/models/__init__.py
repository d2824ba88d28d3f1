"""Policies. ``build_policy(name, obs_dim, action_dim, **options)`` looks a policy up in ``POLICIES``."""

from embodied_rl.models.registry import POLICIES, build_policy
from embodied_rl.models import mlp as _mlp  # noqa: F401  (registers "mlp")
from embodied_rl.models import mlp_sac as _mlp_sac  # noqa: F401  (registers "mlp_sac")
from embodied_rl.models import mlp_categorical as _mlp_categorical  # noqa: F401  (registers "mlp_categorical")
from embodied_rl.models import transformer as _transformer  # noqa: F401  (registers "transformer")
from embodied_rl.models import cnn as _cnn  # noqa: F401  (registers "cnn")

__all__ = ["POLICIES", "build_policy"]
from embodied_rl.models import openvla as _openvla  # noqa: F401,E402  (registers "openvla", "openvla_oft")
from embodied_rl.models import pi0 as _pi0  # noqa: F401,E402  (registers "pi0")
