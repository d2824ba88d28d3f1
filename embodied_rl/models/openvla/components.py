"""OpenVLA-OFT's side files in a checkpoint directory: ``proprio_projector--<step>_checkpoint.pt``,
``action_head--<step>_checkpoint.pt`` (torch state dicts, ``module.`` prefixed when trained under DDP) and
``dataset_statistics.json`` (the fine-tuning data's ``norm_stats``).

Reference (moojink/openvla-oft, ``experiments/robot/openvla_utils.py``: ``find_checkpoint_file``,
``load_component_state_dict``, ``_load_dataset_stats``; ``vla-scripts/finetune.py``: ``save_training_checkpoint``):
a component is the one file whose name holds ``<component>`` and ``checkpoint``; its ``module.`` prefixes are
stripped; ``dataset_statistics.json``, when present, replaces the config's ``norm_stats``. Training writes
``<component>--latest_checkpoint.pt`` (or ``--<step>_checkpoint.pt``). A diffusion head (``noise_predictor.*``
weights, a ``noisy_action_projector--*`` file) is not supported here and is refused by name."""

from __future__ import annotations

import json
import os

import torch

PROPRIO_PROJECTOR = "proprio_projector"
ACTION_HEAD = "action_head"
NOISY_ACTION_PROJECTOR = "noisy_action_projector"
SAVED_SUFFIX = "--latest_checkpoint.pt"
DATASET_STATISTICS = "dataset_statistics.json"


def component_file(directory: str, component: str) -> str | None:
    """The path of ``component``'s file in ``directory`` (None when absent); several are refused, as the
    reference does, since nothing says which one the weights go with."""
    found = sorted(name for name in os.listdir(directory)
                   if name.startswith(component + "--") and "checkpoint" in name)
    if len(found) > 1:
        raise ValueError(f"openvla checkpoint {directory!r} holds several {component} files {found}; allowed: "
                         f"exactly one")
    return os.path.join(directory, found[0]) if found else None


def load_component(directory: str, component: str) -> dict[str, torch.Tensor] | None:
    """``component``'s state dict (``module.`` prefixes stripped), or None when the directory has no such file."""
    path = component_file(directory, component)
    if path is None:
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}


def load_action_head(directory: str) -> dict[str, torch.Tensor] | None:
    """The L1 regression head's state dict, None when absent; a diffusion head raises ValueError (one line)."""
    state = load_component(directory, ACTION_HEAD)
    diffusion = component_file(directory, NOISY_ACTION_PROJECTOR) is not None or (
        state is not None and any(k.startswith("noise_predictor.") for k in state))
    if diffusion:
        raise ValueError(f"openvla checkpoint {directory!r} has a diffusion action head; allowed: an L1 regression "
                         f"head (action_head--*_checkpoint.pt with model.* weights) or none")
    return state


def save_component(module: torch.nn.Module, directory: str, component: str) -> None:
    """Writes ``module``'s state dict (CPU tensors) as ``<component>--latest_checkpoint.pt``."""
    state = {k: v.detach().cpu().contiguous().clone() for k, v in module.state_dict().items()}
    torch.save(state, os.path.join(directory, component + SAVED_SUFFIX))


def dataset_statistics(directory: str) -> dict | None:
    """The ``norm_stats`` of ``dataset_statistics.json`` (``{dataset: {"action": ..., "proprio": ...}}``), or None."""
    path = os.path.join(directory, DATASET_STATISTICS)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)
