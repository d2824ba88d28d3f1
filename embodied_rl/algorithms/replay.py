"""A fixed-capacity ring buffer of transitions for the off-policy learners; it lives with the actor (on its device)
and is saved in the actor's checkpoints, so a resumed run continues with the same buffer."""

from __future__ import annotations

import torch

TRANSITION_KEYS = ("obs", "actions", "rewards", "next_obs", "bootstrap")
"""obs ``[n, ...]`` (a tensor or a dict of them), actions ``[n, M]`` (the flat decision), rewards ``[n]``,
next_obs like obs, bootstrap ``[n]`` float (1: the target bootstraps from next_obs, 0: it does not)."""


def _empty(value: torch.Tensor, capacity: int) -> torch.Tensor:
    return torch.zeros((capacity, *value.shape[1:]), dtype=value.dtype, device=value.device)


def _apply(x, fn):
    """``fn`` on a tensor, or on each tensor of a (nested) dict."""
    return {k: _apply(v, fn) for k, v in x.items()} if isinstance(x, dict) else fn(x)


def _zip_apply(x, y, fn):
    return {k: _zip_apply(x[k], y[k], fn) for k in x} if isinstance(x, dict) else fn(x, y)


class ReplayBuffer:
    """Holds the latest ``capacity`` transitions (dicts of ``TRANSITION_KEYS``); storage is made at the first
    ``add``, shaped like what it receives."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.storage: dict | None = None
        self.size = 0  # transitions held
        self.position = 0  # where the next one goes
        self.added = 0  # transitions ever added

    def __len__(self) -> int:
        return self.size

    def add(self, transitions: dict) -> None:
        """Append ``n`` transitions (the oldest are overwritten once full; of more than ``capacity``, the last
        ``capacity`` are kept)."""
        n = len(transitions["rewards"])
        if n == 0:
            return
        if self.storage is None:
            self.storage = {k: _apply(transitions[k], lambda v: _empty(v, self.capacity)) for k in TRANSITION_KEYS}
        skip = max(0, n - self.capacity)
        index = (self.position + torch.arange(skip, n, device=transitions["rewards"].device)) % self.capacity
        for key in TRANSITION_KEYS:
            def put(store, value):
                store[index.to(store.device)] = value[skip:].to(store.dtype).to(store.device)
            _zip_apply(self.storage[key], transitions[key], put)
        self.position = int((self.position + n) % self.capacity)
        self.size = min(self.capacity, self.size + n)
        self.added += n

    def sample(self, count: int, generator: torch.Generator) -> dict:
        """``count`` transitions drawn uniformly with replacement (``generator`` on the CPU)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        index = torch.randint(self.size, (count,), generator=generator)
        return {k: _apply(self.storage[k], lambda v: v[index.to(v.device)]) for k in TRANSITION_KEYS}

    def state_dict(self) -> dict:
        """The held transitions (on the CPU) and the ring's counters."""
        held = None if self.storage is None else {
            k: _apply(self.storage[k], lambda v: v[:self.size].detach().cpu().clone()) for k in TRANSITION_KEYS}
        return {"capacity": self.capacity, "size": self.size, "position": self.position, "added": self.added,
                "transitions": held}

    def load_state_dict(self, state: dict, device: torch.device | str = "cpu") -> None:
        self.storage, self.size, self.position, self.added = None, 0, 0, 0
        held = state.get("transitions")
        if held is not None and state["size"]:
            self.storage = {k: _apply(held[k], lambda v: _empty(v.to(device), self.capacity)) for k in TRANSITION_KEYS}
            for key in TRANSITION_KEYS:
                def put(store, value):
                    store[:len(value)] = value.to(device)
                _zip_apply(self.storage[key], held[key], put)
        self.size = int(state["size"])
        self.position = int(state["position"]) % self.capacity
        self.added = int(state["added"])
