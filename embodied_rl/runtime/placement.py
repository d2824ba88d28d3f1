"""Placement: which device slots each component runs on, read from configuration, never from code.

A slot is a CPU core (Ray CPU resources) on a CPU-only cluster and a GPU where GPUs exist. Components map to
slot ranges written like ``"0-1"``, ``"0,2"`` or ``"3"``. The mode follows from the map:

* collocated: every component on the same slots (they take turns);
* disaggregated: no two components share a slot (they run at the same time);
* hybrid: anything in between (e.g. env and rollout share slots, the actor has its own), or any placement
  whose env/rollout loop is split into pipeline stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class PlacementError(ValueError):
    """A placement that cannot work; the message is one line naming the component and the problem."""


class PlacementMode(str, Enum):
    COLLOCATED = "collocated"
    DISAGGREGATED = "disaggregated"
    HYBRID = "hybrid"


def parse_slots(text: str | int, component: str, num_slots: int) -> tuple[int, ...]:
    """``"0-1"`` / ``"0,2"`` / ``3`` -> sorted slot indices, checked against ``num_slots``."""
    items = [part.strip() for part in str(text).split(",") if part.strip()]
    if not items:
        raise PlacementError(f"placement.{component}: no slots given; write e.g. '0-1' or '0,2'")
    slots: set[int] = set()
    for item in items:
        low, _, high = item.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise PlacementError(f"placement.{component}={text!r}: {item!r} is not a slot or a range "
                                 "like 0-1") from None
        if first > last or first < 0:
            raise PlacementError(f"placement.{component}={text!r}: range {item!r} is empty or negative")
        if last >= num_slots:
            raise PlacementError(f"placement.{component}={text!r}: slot {last} is out of range; "
                                 f"this cluster has slots 0-{num_slots - 1}")
        slots.update(range(first, last + 1))
    return tuple(sorted(slots))


@dataclass(frozen=True)
class Placement:
    """Slots per component (e.g. ``{"env": (0, 1), "rollout": (0, 1), "actor": (0, 1)}``) and pipeline stages."""

    slots: dict
    num_slots: int
    pipeline_stages: int = 1

    @property
    def mode(self) -> PlacementMode:
        groups = list(self.slots.values())
        if self.pipeline_stages > 1:
            return PlacementMode.HYBRID
        if all(g == groups[0] for g in groups):
            return PlacementMode.COLLOCATED
        if all(set(a).isdisjoint(b) for i, a in enumerate(groups) for b in groups[i + 1:]):
            return PlacementMode.DISAGGREGATED
        return PlacementMode.HYBRID

    def shared_with(self, component: str) -> list[str]:
        """Other components that share at least one slot with ``component`` (they must take turns)."""
        mine = set(self.slots[component])
        return [name for name, slots in self.slots.items() if name != component and mine & set(slots)]

    def describe(self) -> str:
        parts = ", ".join(f"{name}: {_ranges(slots)}" for name, slots in self.slots.items())
        stages = f", {self.pipeline_stages} pipeline stages" if self.pipeline_stages > 1 else ""
        return f"placement {self.mode.value} ({parts}{stages})"


def _ranges(slots: tuple[int, ...]) -> str:
    return f"{slots[0]}-{slots[-1]}" if slots == tuple(range(slots[0], slots[-1] + 1)) and len(slots) > 1 \
        else ",".join(map(str, slots))


def build_placement(components: dict, num_slots: int, pipeline_stages: int = 1,
                    required: tuple[str, ...] = ("env", "rollout", "actor")) -> Placement:
    """Validate a component -> slots map. Keys may name several components: ``"env,rollout": "0-1"``."""
    if pipeline_stages < 1:
        raise PlacementError(f"placement.pipeline_stages={pipeline_stages} is out of range; allowed: >= 1")
    slots: dict[str, tuple[int, ...]] = {}
    for key, value in components.items():
        for name in (n.strip() for n in str(key).split(",")):
            if name not in required:
                raise PlacementError(f"placement.{name}: unknown component; allowed: {', '.join(required)}")
            if name in slots:
                raise PlacementError(f"placement.{name}: placed twice")
            slots[name] = parse_slots(value, name, num_slots)
    missing = [name for name in required if name not in slots]
    if missing:
        raise PlacementError(f"placement: no slots for {', '.join(missing)}; every component needs some")
    return Placement({name: slots[name] for name in required}, num_slots, pipeline_stages)
