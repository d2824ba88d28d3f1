"""Benchmarks that print ratios measured in one run (these machines are shared and noisy)."""

import json

from embodied_rl.config.errors import ConfigError


def print_report(result: dict, as_json: bool) -> None:
    """A bench's result: one JSON line, or one aligned ``key value`` line per entry."""
    if as_json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:<40} {value}")


def require_at_least_one(**arguments: int) -> None:
    """Raise a one-line ConfigError for the first command-line count below 1 (``env_workers`` -> ``--env-workers``)."""
    for name, value in arguments.items():
        if value < 1:
            raise ConfigError(f"--{name.replace('_', '-')}={value} is out of range; allowed: an integer >= 1")
