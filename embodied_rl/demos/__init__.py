"""Demonstrations: make them (motion planning, a trained checkpoint), cache them, load them for training.

``load_demos(path) -> DemoDataset`` (flat ``[N, ...]`` arrays, ``action_chunks(K)``); ``ensure_demos(resolved)``
returns cached demos or makes them (``embodied-rl demos``).
"""

from embodied_rl.demos.dataset import DemoDataset, action_chunks, load_demos

__all__ = ["DemoDataset", "action_chunks", "load_demos"]
