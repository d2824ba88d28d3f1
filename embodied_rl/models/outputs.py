"""What ``policy.act`` returns, read the same way for every policy."""

from __future__ import annotations

STORED_PREFIX = "stored."
"""Keys of what a policy keeps of a decision for its update (``act``'s fourth output). The runtime records them in
the observation dict beside the step's observation, so ``evaluate(obs, actions)`` finds them in ``obs``."""


def unpack_act(outputs) -> tuple:
    """``policy.act(...)``'s ``(actions, logp, values)`` or ``(actions, logp, values, stored)`` ->
    ``(actions [B, ...], logp [B], values [B], stored dict or None)``; every ``stored`` key must start with
    ``STORED_PREFIX``."""
    actions, logp, values, *rest = outputs
    stored = rest[0] if rest else None
    if stored:
        bad = [k for k in stored if not k.startswith(STORED_PREFIX)]
        if bad:
            raise ValueError(f"policy.act returned stored keys {bad}; they must start with {STORED_PREFIX!r}")
    return actions, logp, values, (stored or None)
