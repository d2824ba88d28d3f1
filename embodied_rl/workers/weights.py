"""Policy weights as plain numpy arrays: how they leave a worker (object store, checkpoints) and come back."""

from __future__ import annotations

import numpy as np
import torch


def trained_names(policy: torch.nn.Module) -> set[str]:
    """Names in ``policy.state_dict()`` that training can change: parameters that require gradients, and buffers
    (e.g. normalisation statistics). With LoRA the frozen base weights are not among them, so a weight sync after
    the first one sends only the adapters and heads."""
    names = {name for name, p in policy.named_parameters() if p.requires_grad}
    names |= {name for name, _ in policy.named_buffers()}
    return names & set(policy.state_dict())


def weights_to_numpy(policy: torch.nn.Module, only_trained: bool = False) -> dict[str, np.ndarray]:
    """``policy.state_dict()`` copied to host memory as numpy arrays (safe to hand to another process);
    ``only_trained``: just the ``trained_names`` (a receiver that already holds the frozen weights)."""
    keep = trained_names(policy) if only_trained else None
    return {name: value.detach().cpu().numpy().copy() for name, value in policy.state_dict().items()
            if keep is None or name in keep}


def weights_template(policy: torch.nn.Module, only_trained: bool = False) -> dict[str, torch.Tensor]:
    """The live tensors of ``policy.state_dict()`` (all, or the ``trained_names``), for an in-place broadcast."""
    keep = trained_names(policy) if only_trained else None
    return {name: value for name, value in policy.state_dict().items() if keep is None or name in keep}


def load_numpy_weights(policy: torch.nn.Module, weights: dict) -> None:
    """Copy ``{name: array}`` into ``policy``'s tensors, wherever they live (device or host). ``weights`` holds every
    entry of the state dict, or at least every ``trained_names`` entry (a sync that leaves out frozen weights)."""
    expected = set(policy.state_dict())
    unknown = set(weights) - expected
    missing = expected - set(weights)
    if unknown or (missing & trained_names(policy)):
        raise KeyError(f"weights do not fit the policy: unknown {sorted(unknown)[:5]}, missing trained "
                       f"{sorted(missing & trained_names(policy))[:5]}")
    policy.load_state_dict({name: torch.from_numpy(np.array(value)) for name, value in weights.items()},
                           strict=not missing)
