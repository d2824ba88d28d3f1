"""Benchmarks that print ratios measured in one run (these machines are shared and noisy)."""
