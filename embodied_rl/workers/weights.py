"""Policy weights as host tensors in their own dtype (bf16 stays bf16): how they leave a worker (object store,
checkpoints) and come back."""

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


def host_weights(policy: torch.nn.Module | None = None, only_trained: bool = False,
                 state: dict | None = None) -> dict[str, torch.Tensor]:
    """``policy.state_dict()`` (or ``state``) copied to host memory as contiguous tensors of their own dtype, each
    its own storage (tied weights become two copies, as safetensors requires), safe to hand to another process;
    ``only_trained``: just the ``trained_names`` (a receiver that already holds the frozen weights)."""
    keep = trained_names(policy) if only_trained else None
    items = (state if state is not None else policy.state_dict()).items()
    return {name: value.detach().to(device="cpu", copy=True).contiguous() for name, value in items
            if keep is None or name in keep}


def as_tensor(value) -> torch.Tensor:
    """A tensor as given, or a numpy array (weights written before they travelled as tensors) as a tensor."""
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(np.array(value))


def weights_template(policy: torch.nn.Module, only_trained: bool = False) -> dict[str, torch.Tensor]:
    """The live tensors of ``policy.state_dict()`` (all, or the ``trained_names``), for an in-place broadcast."""
    keep = trained_names(policy) if only_trained else None
    return {name: value for name, value in policy.state_dict().items() if keep is None or name in keep}


def load_host_weights(policy: torch.nn.Module, weights: dict) -> None:
    """Copy ``{name: tensor or array}`` into ``policy``'s tensors, wherever they live (device or host), each cast to
    the dtype the policy keeps it in (fp32 master weights receive bf16 values and the other way round). ``weights``
    holds every entry of the state dict, or at least every ``trained_names`` entry (a sync that leaves out frozen
    weights); a policy with ``complete_weights`` first fills in what it adds to such weights (a residual actor
    loading the plain actor it fine-tunes)."""
    if hasattr(policy, "complete_weights"):
        weights = policy.complete_weights(weights)
    expected = set(policy.state_dict())
    unknown = set(weights) - expected
    missing = expected - set(weights)
    if unknown or (missing & trained_names(policy)):
        raise KeyError(f"weights do not fit the policy: unknown {sorted(unknown)[:5]}, missing trained "
                       f"{sorted(missing & trained_names(policy))[:5]}")
    policy.load_state_dict({name: as_tensor(value) for name, value in weights.items()}, strict=not missing)
