"""Progress lines tell the truth: a slow stage's rate is not ``0.0 iterations/s``, a stage that overshoots its total
is not ``eta -2s``, and a resumed run's rate counts only what this process did."""

from embodied_rl.utils.progress import TrainingProgress, eta_seconds, rate_text


def test_slow_rates_are_shown_per_minute_or_hour():
    assert rate_text(12.34, "steps") == "12.3 steps/s"
    assert rate_text(1 / 40, "iterations") == "1.5 iterations/min"  # an SFT iteration of 40 s
    assert rate_text(1 / 1800, "iterations") == "2.0 iterations/h"
    assert rate_text(0.0, "steps") == "0.0 steps/h"


def test_eta_is_zero_once_the_total_is_passed_and_unknown_before_any_progress():
    assert eta_seconds(96, 100, 2.0) == 2.0
    assert eta_seconds(104, 100, 2.0) == 0.0  # a GRPO stage ending past total_env_steps
    assert eta_seconds(0, 100, 0.0) == float("inf")


def test_a_resumed_runs_line_counts_only_this_processes_steps():
    progress = TrainingProgress(1000, "task", done=600, plain_every_s=1e9)
    assert progress.line(700, 50.0).startswith("steps 700/1,000  2.0 steps/s")  # 100 steps in 50 s, not 700
    assert progress.line(700, 50.0).endswith("eta 150s")
    supervised = TrainingProgress(10, "task sft", unit="iterations", plain_every_s=1e9)
    assert "1.5 iterations/min" in supervised.line(2, 80.0) and "eta 320s" in supervised.line(2, 80.0)
    assert supervised.line(11, 440.0).endswith("eta 0s")
