"""The advantage estimators' registry (``group_family`` dispatches on it)."""

from __future__ import annotations

from embodied_rl.utils.registry import Registry

ADVANTAGE_ESTIMATORS = Registry("advantage estimator")
