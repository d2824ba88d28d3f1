"""Move torch modules (parameters, gradients, buffers) and optimizer state off their device and back.

A component that shares a device with others gives the device up between its turns: ``Offloader.offload``
copies every tensor that lives on an accelerator into host memory (pinned, so the copies back are fast and
asynchronous) and frees the device copy; ``onload`` copies them back. Parameters keep their identity (only
``param.data`` is swapped, as ``nn.Module.to`` does), so optimizers and anything else holding the parameter
objects keep working. Tensors already in host memory (all of them on a CPU-only machine) are left where they
are: offloading is then free and frees nothing, but the bookkeeping (``offloaded``, counters) is the same.

Do not replace parameters or optimizer state (``load_state_dict`` on an optimizer) while offloaded: ``onload``
moves back the tensors it moved out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class MoveReport:
    """One offload or onload: ``bytes`` moved (freed on the device by an offload), how long it took, and where the
    component is now (``"device"`` or ``"host"``)."""

    bytes: int
    seconds: float
    location: str


class _Slot:
    """Where one tensor lives: a parameter's data or grad, a module buffer, or an optimizer state entry."""

    def __init__(self, owner, key, kind: str):
        self.owner, self.key, self.kind = owner, key, kind

    def get(self) -> torch.Tensor | None:
        if self.kind == "param":
            return self.owner.data
        if self.kind == "grad":
            return self.owner.grad
        return self.owner[self.key]  # module._buffers or an optimizer state dict

    def set(self, tensor: torch.Tensor) -> None:
        if self.kind == "param":
            self.owner.data = tensor
        elif self.kind == "grad":
            self.owner.grad.data = tensor  # as nn.Module._apply does: the grad tensor keeps its identity
        else:
            self.owner[self.key] = tensor


class Offloader:
    """Offloads and onloads ``modules`` and ``optimizers`` together; ``host`` is where offloaded tensors live."""

    def __init__(self, modules: Sequence[torch.nn.Module], optimizers: Sequence[torch.optim.Optimizer] = (),
                 host: str | torch.device = "cpu"):
        self.modules = list(modules)
        self.optimizers = list(optimizers)
        self.host = torch.device(host)
        self.offloaded = False
        self.offloads = 0
        self.onloads = 0
        self._moved: list[tuple[_Slot, torch.device]] = []  # what the last offload moved, and from where

    def offload(self) -> MoveReport:
        """Move every device tensor to host memory (pinned when the device is a GPU); idempotent."""
        start = time.perf_counter()
        if self.offloaded:
            return MoveReport(0, 0.0, "host")
        moved_bytes, copies, pending = 0, {}, []
        for slot in self._slots():
            tensor = slot.get()
            if tensor is None or tensor.device == self.host:
                continue
            key = _identity(tensor)
            if key not in copies:  # a tensor shared by two owners moves once
                pinned = tensor.device.type == "cuda"
                copies[key] = torch.empty_like(tensor, device=self.host, pin_memory=pinned)
                copies[key].copy_(tensor, non_blocking=pinned)
                moved_bytes += tensor.numel() * tensor.element_size()
            pending.append((slot, tensor.device, copies[key]))
        tensor = None  # hold no reference to a device tensor past its swap, so empty_cache can return it
        devices = {device for _, device, _ in pending}
        _synchronize(devices)
        for slot, _, copy in pending:  # parameters before their grads: a grad follows its parameter's device
            slot.set(copy)
        self._moved = [(slot, device) for slot, device, _ in pending]
        if any(device.type == "cuda" for device in devices):
            # Other processes share this GPU: hand the freed blocks back to the driver, not only to our cache.
            torch.cuda.empty_cache()
        self.offloaded = True
        self.offloads += 1
        return MoveReport(moved_bytes, time.perf_counter() - start, "host")

    def onload(self) -> MoveReport:
        """Move what ``offload`` moved back to the devices it came from; idempotent."""
        start = time.perf_counter()
        if not self.offloaded:
            return MoveReport(0, 0.0, "device")
        moved_bytes, copies, pending = 0, {}, []
        for slot, device in self._moved:
            tensor = slot.get()
            key = (_identity(tensor), device)
            if key not in copies:
                copies[key] = tensor.to(device, non_blocking=tensor.is_pinned())
                moved_bytes += tensor.numel() * tensor.element_size()
            pending.append((slot, copies[key]))
        _synchronize({device for _, device in self._moved})
        for slot, copy in pending:
            slot.set(copy)
        self._moved = []
        self.offloaded = False
        self.onloads += 1
        return MoveReport(moved_bytes, time.perf_counter() - start, "device")

    def _slots(self) -> list[_Slot]:
        slots: list[_Slot] = []
        seen_params: set[int] = set()
        for module in self.modules:
            for param in module.parameters():
                if id(param) in seen_params:
                    continue
                seen_params.add(id(param))
                slots.append(_Slot(param, None, "param"))
                if param.grad is not None:
                    slots.append(_Slot(param, None, "grad"))
            for submodule in module.modules():
                slots.extend(_Slot(submodule._buffers, name, "entry")
                             for name, buffer in submodule._buffers.items() if buffer is not None)
        for optimizer in self.optimizers:
            for state in optimizer.state.values():
                slots.extend(_Slot(state, key, "entry") for key, value in state.items() if torch.is_tensor(value))
        return slots


def _identity(tensor: torch.Tensor) -> tuple:
    """Same memory, same view. (Not ``id``: ``param.data`` is a fresh Python object at every access.)"""
    return tensor.device, tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride()


def _synchronize(devices: set) -> None:
    """Wait for non-blocking copies, so the source can be freed and the destination read."""
    for device in devices:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
