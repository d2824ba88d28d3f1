"""The KL reference of an LM trainer: the model as RL starts (the SFT result), scored without gradients.

Three forms, by what costs least:

* **LoRA** (adapters on a frozen base): the base is already the reference's; only the adapters differ. The reference
  is a copy of the adapters as RL starts (a few MB), swapped into the live model for its pass and swapped back.
* **a copy in the checkpoint's dtype** (single and DDP trainers): bf16 for a bf16 checkpoint, half the float32
  masters' bytes (the forward runs under autocast to that dtype anyway). ``offload=True`` keeps it in host memory
  and moves it to the trainer's device for its pass only (when no gradients exist), so it adds nothing to the
  trainer's peak during the update.
* **a sharded copy** (FSDP): ``engine.frozen_copy()``, each rank holding its shard.
"""

from __future__ import annotations

import contextlib

import torch


class KLReference:
    """Made once (``capture``) from the live model, then ``module()`` gives something to score with."""

    def __init__(self, engine, model: torch.nn.Module, compute_dtype: torch.dtype, device: torch.device,
                 lora: bool, offload: bool):
        self.engine, self.model = engine, model
        self.compute_dtype, self.device = compute_dtype, device
        self.lora, self.offload = lora, offload
        self.copy: torch.nn.Module | None = None
        self.adapters: dict[str, torch.Tensor] | None = None

    @property
    def captured(self) -> bool:
        return self.copy is not None or self.adapters is not None

    def capture(self) -> None:
        """The model as it is now becomes the reference."""
        if self.lora:
            self.adapters = {name: p.detach().clone() for name, p in self.model.named_parameters() if p.requires_grad}
            return
        copy = self.engine.frozen_copy()
        if self.engine.backend in ("single", "ddp"):
            copy = copy.to(dtype=self.compute_dtype, device="cpu" if self.offload else self.device)
        self.copy = copy

    @contextlib.contextmanager
    def module(self):
        """The reference as a module for no-grad forwards, for the duration of the block."""
        if self.adapters is not None:
            live = dict(self.model.named_parameters())
            kept = {name: live[name].data for name in self.adapters}
            try:
                for name, value in self.adapters.items():
                    live[name].data = value
                yield self.model
            finally:
                for name, value in kept.items():
                    live[name].data = value
            return
        if self.offload and self.copy is not None and self.device.type != "cpu":
            self.copy.to(self.device)
            try:
                yield self.copy
            finally:
                self.copy.to("cpu")
            return
        yield self.copy

    def state(self) -> dict | None:
        """``{"adapters": ...}`` or ``{"weights": ...}`` (host tensors; rank 0 under FSDP, None elsewhere), or
        None before capture."""
        if self.adapters is not None:
            return {"adapters": {k: v.cpu().clone() for k, v in self.adapters.items()}}
        if self.copy is None:
            return None
        weights = self.engine.full_state_dict(self.copy)
        return None if weights is None else {"weights": {k: v.detach().cpu().clone() for k, v in weights.items()}}

    def load(self, state: dict | None) -> None:
        """Restore ``state()`` (from rank 0, given to every rank); None: no reference yet."""
        self.copy = self.adapters = None
        if state is None:
            return
        if "adapters" not in state and "weights" not in state:  # a checkpoint written before this module
            state = {"weights": state}
        if self.lora and "weights" in state:  # a LoRA run's older checkpoint: the whole model, adapters among it
            trained = {name for name, p in self.model.named_parameters() if p.requires_grad}
            state = {"adapters": {k: v for k, v in state["weights"].items() if k in trained}}
        if "adapters" in state:
            self.adapters = {k: v.to(self.device) for k, v in state["adapters"].items()}
            return
        self.capture()
        where = "cpu" if self.offload and self.engine.backend in ("single", "ddp") else self.device
        self.engine.load_full_state_dict({k: v.to(where) for k, v in state["weights"].items()}, self.copy)
