"""Registry of policy classes by name."""

from __future__ import annotations

from embodied_rl.algorithms.registry import Registry

POLICIES = Registry("policy")


def build_policy(name: str, obs_dim: int, action_dim: int, **options):
    return POLICIES.get(name)(obs_dim=obs_dim, action_dim=action_dim, **options)


def observation_modes(name: str) -> tuple[str, ...]:
    """The ``env.obs_mode`` values policy ``name`` accepts (its class attribute ``observation_modes``; a policy
    that declares none takes state vectors only)."""
    return tuple(getattr(POLICIES.get(name), "observation_modes", ("state",)))


def token_level(name: str) -> bool:
    """Whether policy ``name`` gives per-token log-probs (``evaluate_tokens``; ``algorithm.ratio_level=token``)."""
    return hasattr(POLICIES.get(name), "evaluate_tokens")


def policy_sizes(name: str) -> tuple[str, ...]:
    """The ``policy.size`` values policy ``name`` takes (its class attribute ``sizes``; ``("tiny",)`` if none)."""
    return tuple(getattr(POLICIES.get(name), "sizes", ("tiny",)))


def policy_options(name: str) -> list[str]:
    """Keyword options policy ``name`` takes beyond those every policy gets (obs/action dims, widths, log std, and
    for dict observations their shapes)."""
    import inspect

    common = {"self", "obs_dim", "action_dim", "hidden_sizes", "init_log_std", "obs_shapes", "size"}
    # (action_chunk and obs_indices are options: policies that have them list them in their signature)
    parameters = inspect.signature(POLICIES.get(name).__init__).parameters
    return [p for p in parameters if p not in common and parameters[p].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
