"""A tiny name -> callable registry (algorithms, advantage estimators, policies register in one)."""

from __future__ import annotations

from typing import Callable, Dict, List, TypeVar

F = TypeVar("F", bound=Callable)


class Registry:
    """Maps names to callables; entries are added with the `register` decorator."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: Dict[str, Callable] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator registering the decorated callable under `name`."""

        def decorator(fn: F) -> F:
            if name in self._entries:
                raise KeyError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = fn
            return fn

        return decorator

    def get(self, name: str) -> Callable:
        """Return the callable registered as `name`; KeyError lists the allowed names."""
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(
                f"unknown {self.kind} {name!r}; allowed: {', '.join(self.names())}"
            ) from None

    def names(self) -> List[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries
