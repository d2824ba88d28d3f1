"""The actor's optimizer groups: the parameters it trains (frozen ones left out), the critic's in a group of its own,
and optimizer states saved while the groups still held the frozen parameters too."""

from __future__ import annotations

from torch import nn

CRITIC_PREFIX = "critic"
"""Parameters whose names start with it form the critic's group (``critic_lr_scale``)."""


def _split(named: list) -> list[list[nn.Parameter]]:
    """``[(name, parameter)]`` -> ``[the others, the critic's]``."""
    return [[p for n, p in named if not n.startswith(CRITIC_PREFIX)], [p for n, p in named if n.startswith(
        CRITIC_PREFIX)]]


def parameter_groups(policy: nn.Module, critic_lr_scale: float = 1.0) -> list[dict]:
    """Adam's groups over the parameters of ``policy`` that require gradients (a LoRA base, or Pi0's VLM with
    ``train_expert_only``, is not among them): the critic's in a group of its own whose learning rate is scaled
    by ``critic_lr_scale``, the rest at 1 (``lr_scale`` of each group); empty groups left out."""
    rest, critic = _split([(n, p) for n, p in policy.named_parameters() if p.requires_grad])
    return [g for g in ({"params": rest, "lr_scale": 1.0}, {"params": critic, "lr_scale": critic_lr_scale})
            if g["params"]]


def renumbered_optimizer_state(state: dict, policy: nn.Module, groups: list[dict]) -> dict:
    """An optimizer ``state_dict`` for an optimizer over ``groups`` (``parameter_groups`` of ``policy``): one saved
    when the groups held every parameter, frozen ones too (checkpoints written before they were left out), has its
    entries renumbered to the trained parameters; any other state is returned as it is (torch's own check then
    names a mismatch)."""
    saved = [len(g["params"]) for g in state["param_groups"]]
    if saved == [len(g["params"]) for g in groups]:
        return state
    everything = [g for g in _split(list(policy.named_parameters())) if g]
    if saved != [len(g) for g in everything] or len(groups) != len(everything):
        return state
    old_index = {id(p): i for i, p in enumerate(p for group in everything for p in group)}
    new_index, count = [], 0
    for group in groups:
        new_index.append({old_index[id(p)]: count + i for i, p in enumerate(group["params"])})
        count += len(group["params"])
    renumber = {old: new for mapping in new_index for old, new in mapping.items()}
    return {"state": {renumber[i]: value for i, value in state["state"].items() if i in renumber},
            "param_groups": [dict(saved_group, params=list(mapping.values()))
                             for saved_group, mapping in zip(state["param_groups"], new_index)]}
