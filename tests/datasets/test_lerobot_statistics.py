"""Statistics by hand: histogram quantiles equal numpy's linear ``np.quantile``; pixel statistics per channel in
[0, 1] units shaped [3, 1, 1]; vector statistics per dimension."""

from __future__ import annotations

import numpy as np
import pytest

from embodied_rl.datasets.lerobot import statistics


@pytest.mark.parametrize("values", [np.array([7]), np.array([3, 3, 3]), np.array([0, 255]),
                                    np.random.default_rng(0).integers(0, 256, 1001),
                                    np.random.default_rng(1).integers(10, 20, 64)])
@pytest.mark.parametrize("q", [0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0])
def test_histogram_quantiles_equal_numpy(values, q):
    counts = np.bincount(values, minlength=256)
    assert statistics.histogram_quantile(counts, q) == pytest.approx(float(np.quantile(values, q)), abs=1e-9)


def test_image_statistics_per_channel_in_unit_range():
    frames = np.random.default_rng(2).integers(0, 256, (5, 4, 3, 3), dtype=np.uint8)
    stats = statistics.image_stats(statistics.pixel_histogram(frames), len(frames))
    pixels = frames.reshape(-1, 3) / 255.0
    assert set(stats) == set(statistics.STAT_KEYS) and stats["count"].tolist() == [5]
    for key, expected in [("min", pixels.min(0)), ("max", pixels.max(0)), ("mean", pixels.mean(0)),
                          ("std", pixels.std(0)), ("q10", np.quantile(pixels, 0.1, axis=0)),
                          ("q90", np.quantile(pixels, 0.9, axis=0))]:
        assert stats[key].shape == (3, 1, 1)
        np.testing.assert_allclose(stats[key].ravel(), expected, rtol=1e-12, err_msg=key)


def test_vector_statistics_per_dimension_booleans_as_numbers():
    flags = np.array([True, False, False, True])
    stats = statistics.vector_stats(flags)
    assert stats["mean"].tolist() == [0.5] and stats["min"].tolist() == [0.0] and stats["count"].tolist() == [4]
    values = np.arange(12, dtype=np.float32).reshape(6, 2)
    stats = statistics.vector_stats(values)
    np.testing.assert_allclose(stats["q50"], [5.0, 6.0])
    np.testing.assert_allclose(stats["std"], values.std(0))
