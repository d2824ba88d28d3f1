"""Registry of policy classes by name."""

from __future__ import annotations

from embodied_rl.utils.registry import Registry

POLICIES = Registry("policy")


COMMON_OPTIONS = ("hidden_sizes", "init_log_std", "obs_shapes", "size")
"""Options the runner gives every policy (from ``policy.*`` and the env); each reaches a policy only if its
constructor takes it, so a policy needs no MLP widths or log std of its own."""


def build_policy(name: str, obs_dim: int, action_dim: int, **options):
    """An instance of policy ``name``: ``options`` are its ``policy.options`` plus the ``COMMON_OPTIONS`` it takes."""
    import inspect

    policy_class = POLICIES.get(name)
    taken = inspect.signature(policy_class.__init__).parameters
    accepts_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in taken.values())
    options = {k: v for k, v in options.items() if k not in COMMON_OPTIONS or k in taken or accepts_any}
    return policy_class(obs_dim=obs_dim, action_dim=action_dim, **options)


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

    common = {"self", "obs_dim", "action_dim", *COMMON_OPTIONS}
    # (action_chunk and obs_indices are options: policies that have them list them in their signature)
    parameters = inspect.signature(POLICIES.get(name).__init__).parameters
    return [p for p in parameters if p not in common and parameters[p].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
