"""Statistics over runs (seeds) as RL papers now report them (Agarwal et al., 2021, "Deep RL at the edge of the
statistical precipice", and its ``rliable`` library): the interquartile mean, robust to one outlying seed, with a
percentile bootstrap confidence interval over runs; and curves of several runs on one grid of steps for a mean and
spread band.

Shapes: ``scores`` ``[runs]`` (one final score per seed, e.g. success on the fixed evaluation states); a curve is
``(steps [n], values [n])`` of one run.
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def interquartile_mean(scores) -> float:
    """The mean of the middle half of ``scores`` ``[runs]``: ``int(0.25 * runs)`` of the lowest and of the highest
    dropped (``scipy.stats.trim_mean`` at 0.25, as ``rliable``'s IQM); the plain mean below 4 runs."""
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if scores.size == 0:
        raise ValueError("interquartile_mean of no scores")
    return float(stats.trim_mean(scores, 0.25))


def bootstrap_interval(scores, statistic=interquartile_mean, confidence: float = 0.95, resamples: int = 2000,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over ``scores`` ``[runs]``: the statistic of ``resamples``
    resamplings of the runs with replacement, cut at ``(1 - confidence) / 2`` and its complement. Seeded: the same
    inputs give the same interval."""
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if scores.size == 0:
        raise ValueError("bootstrap_interval of no scores")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence} must be in (0, 1)")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, scores.size, size=(resamples, scores.size))
    values = np.array([statistic(scores[row]) for row in picks])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


def curves_on_grid(curves: list[tuple], points: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Runs' curves ``(steps [n_i], values [n_i])`` on one grid over the steps all of them reached: ``(grid
    [points], values [runs, points])``, each run linearly interpolated between its own points (no run is
    extrapolated past its last step)."""
    if not curves:
        raise ValueError("curves_on_grid of no curves")
    start = max(float(np.min(steps)) for steps, _ in curves)
    stop = min(float(np.max(steps)) for steps, _ in curves)
    if stop < start:
        raise ValueError(f"the runs' steps do not overlap (the latest start {start:g} is after the earliest end "
                         f"{stop:g})")
    grid = np.linspace(start, stop, points)
    values = np.stack([np.interp(grid, np.asarray(steps, float), np.asarray(vals, float)) for steps, vals in curves])
    return grid, values
