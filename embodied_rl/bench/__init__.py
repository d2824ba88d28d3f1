"""Benchmarks that print ratios measured in one run (these machines are shared and noisy)."""

from embodied_rl.config.errors import ConfigError


def require_at_least_one(**arguments: int) -> None:
    """Raise a one-line ConfigError for the first command-line count below 1 (``env_workers`` -> ``--env-workers``)."""
    for name, value in arguments.items():
        if value < 1:
            raise ConfigError(f"--{name.replace('_', '-')}={value} is out of range; allowed: an integer >= 1")
