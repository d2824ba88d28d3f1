"""SFT's learning-rate schedule: cosine from lr to 0 over the stage's gradient steps."""

import pytest

from embodied_rl.algorithms.embodied.sft import SFT, SFTConfig


def test_cosine_schedule_starts_at_lr_halves_midway_and_ends_at_zero():
    sft = SFT(SFTConfig(lr=1e-3, gradient_steps=100))
    assert sft.learning_rate(0) == pytest.approx(1e-3)
    assert sft.learning_rate(50) == pytest.approx(0.5e-3)
    assert sft.learning_rate(100) == pytest.approx(0.0, abs=1e-12)
    assert SFT(SFTConfig(lr=1e-3, cosine_decay=False)).learning_rate(99) == 1e-3
