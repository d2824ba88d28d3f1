"""Feature statistics as LeRobot keeps them (``meta/stats.json`` and the episodes table's ``stats/...`` columns).

For every feature but strings: ``min``, ``max``, ``mean``, ``std`` (population), ``count`` (frames, ``[1]``) and
the quantiles ``q01 q10 q50 q90 q99`` (lerobot 0.4 normalises with them). A vector feature ``[D]`` gets ``[D]``
values per statistic (a scalar feature stored as ``[1]``, ``[1]``); booleans count as 0/1. Camera frames get
one value per channel, shaped ``[3, 1, 1]``, in [0, 1] units (pixel / 255).

Unlike lerobot's writer (which samples and downsizes frames, and estimates quantiles from histograms and averages
them over episodes), every number here is exact over every frame: vector quantiles are numpy's linear
``np.quantile``; pixel statistics come from per-channel 256-bin histograms, which give the same mean, std and
linear quantiles as numpy over all pixels.
"""

from __future__ import annotations

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS = tuple(f"q{int(round(q * 100)):02d}" for q in QUANTILES)
STAT_KEYS = ("min", "max", "mean", "std", "count", *QUANTILE_KEYS)


def vector_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """Statistics over the frames of ``values`` ``[N]`` or ``[N, D]`` (N >= 1): each ``[1]`` or ``[D]``."""
    array = np.asarray(values)
    array = array.reshape(len(array), -1).astype(np.float64)
    if len(array) == 0:
        raise ValueError("statistics need at least one frame")
    stats = {"min": array.min(axis=0), "max": array.max(axis=0), "mean": array.mean(axis=0),
             "std": array.std(axis=0), "count": np.array([len(array)], np.int64)}
    for key, q in zip(QUANTILE_KEYS, QUANTILES):
        stats[key] = np.quantile(array, q, axis=0)
    return stats


def pixel_histogram(frames: np.ndarray) -> np.ndarray:
    """Per-channel counts of each pixel value of ``frames`` uint8 ``[T, H, W, 3]``: int64 ``[3, 256]``."""
    frames = np.asarray(frames, np.uint8)
    return np.stack([np.bincount(frames[..., c].ravel(), minlength=256) for c in range(frames.shape[-1])]
                    ).astype(np.int64)


def image_stats(histogram: np.ndarray, frames: int) -> dict[str, np.ndarray]:
    """Statistics of camera frames from their ``pixel_histogram`` ``[3, 256]`` (summed over ``frames`` frames):
    each ``[3, 1, 1]`` in [0, 1] units; ``count`` ``[1]`` = ``frames``."""
    histogram = np.asarray(histogram, np.int64)
    levels = np.arange(histogram.shape[1], dtype=np.float64)
    totals = histogram.sum(axis=1).astype(np.float64)
    mean = (histogram * levels).sum(axis=1) / totals
    variance = (histogram * (levels[None] - mean[:, None]) ** 2).sum(axis=1) / totals
    present = histogram > 0
    stats = {"min": np.array([levels[row].min() for row in present]),
             "max": np.array([levels[row].max() for row in present]),
             "mean": mean, "std": np.sqrt(variance)}
    for key, q in zip(QUANTILE_KEYS, QUANTILES):
        stats[key] = np.array([histogram_quantile(row, q) for row in histogram])
    shaped = {key: (value / 255.0).reshape(-1, 1, 1) for key, value in stats.items()}
    shaped["count"] = np.array([frames], np.int64)
    return shaped


def histogram_quantile(counts: np.ndarray, q: float) -> float:
    """The ``q`` quantile of the integers ``0 .. len(counts) - 1`` repeated ``counts`` times, interpolated as
    ``np.quantile``'s default (linear) method does."""
    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    position = q * (total - 1)
    below, above = int(np.floor(position)), int(np.ceil(position))
    cumulative = np.cumsum(counts)
    low = float(np.searchsorted(cumulative, below, side="right"))
    high = float(np.searchsorted(cumulative, above, side="right"))
    return low + (position - below) * (high - low)


def as_json(stats: dict[str, dict[str, np.ndarray]]) -> dict:
    """``{feature: {stat: nested lists}}`` for ``meta/stats.json``."""
    return {feature: {key: np.asarray(value).tolist() for key, value in values.items()}
            for feature, values in stats.items()}


def from_json(data: dict) -> dict[str, dict[str, np.ndarray]]:
    """``meta/stats.json`` as numpy arrays."""
    return {feature: {key: np.asarray(value) for key, value in values.items()} for feature, values in data.items()}
