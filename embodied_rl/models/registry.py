"""Registry of policy classes by name."""

from __future__ import annotations

from embodied_rl.algorithms.registry import Registry

POLICIES = Registry("policy")


def build_policy(name: str, obs_dim: int, action_dim: int, **options):
    return POLICIES.get(name)(obs_dim=obs_dim, action_dim=action_dim, **options)
