"""Statistics over seeds against hand-computed values: the interquartile mean, its bootstrap interval, curves on
one grid."""

import numpy as np
import pytest

from embodied_rl.analysis.statistics import bootstrap_interval, curves_on_grid, interquartile_mean


def test_interquartile_mean_drops_a_quarter_at_each_end():
    assert interquartile_mean([1, 2, 3, 4, 5, 6, 7, 8]) == 4.5  # mean of 3, 4, 5, 6
    # 10 runs: 2 cut at each end
    assert interquartile_mean([0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 100.0]) == pytest.approx(0.45)
    assert interquartile_mean([1.0, 2.0, 6.0]) == 3.0  # under 4 runs: the plain mean
    with pytest.raises(ValueError, match="no scores"):
        interquartile_mean([])


def test_bootstrap_interval_holds_the_statistic_and_is_seeded():
    scores = [0.2, 0.4, 0.5, 0.55, 0.6, 0.9]
    low, high = bootstrap_interval(scores, seed=3)
    assert low <= interquartile_mean(scores) <= high and low < high
    assert bootstrap_interval(scores, seed=3) == (low, high)
    assert bootstrap_interval([0.7] * 5) == pytest.approx((0.7, 0.7))
    narrow = bootstrap_interval(scores, confidence=0.5, seed=3)
    assert low <= narrow[0] <= narrow[1] <= high
    mean_low, mean_high = bootstrap_interval([0.0, 1.0], statistic=np.mean, resamples=4000, seed=0)
    assert (mean_low, mean_high) == (0.0, 1.0)  # resamples of two runs: all-0 and all-1 within the 95% tails


def test_curves_meet_on_the_steps_every_run_reached():
    grid, values = curves_on_grid([([0, 10, 20], [0.0, 1.0, 2.0]), ([0, 5, 15], [0.0, 0.0, 3.0])], points=4)
    np.testing.assert_allclose(grid, [0, 5, 10, 15])
    np.testing.assert_allclose(values, [[0.0, 0.5, 1.0, 1.5], [0.0, 0.0, 1.5, 3.0]])
    with pytest.raises(ValueError, match="do not overlap"):
        curves_on_grid([([0, 1], [0, 0]), ([2, 3], [0, 0])])
