"""Pi0 flow-matching VLA policy with Flow-SDE log-probs (registers ``"pi0"``). transformers is imported only when a
policy is built."""

from embodied_rl.models.pi0.configuration import Pi0Settings
from embodied_rl.models.pi0.policy import CHAIN_KEY, Pi0Policy

__all__ = ["Pi0Policy", "Pi0Settings", "CHAIN_KEY"]
