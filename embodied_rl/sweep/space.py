"""A sweep's search space from the command line, checked before any trial starts.

* ``--grid KEY=[v1,v2]``: every value (a YAML flow list; a single value is one point), crossed with the other grids;
* ``--sample KEY=uniform:LOW:HIGH`` | ``loguniform:LOW:HIGH`` | ``randint:LOW:HIGH`` | ``choice:[v1,v2]``: drawn
  anew for each of ``--samples`` samples (Ray Tune's random search);
* ``--seeds N`` (seeds 0..N-1) or ``--seeds 3,7,11``: crossed with everything else, so each setting runs on each
  seed (the report then shows the seeds of each setting together).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml

from embodied_rl.config.errors import ConfigError

DISTRIBUTIONS = ("uniform", "loguniform", "randint", "choice")


@dataclass
class SearchSpace:
    grid: dict[str, list] = field(default_factory=dict)
    sampled: dict[str, tuple] = field(default_factory=dict)  # key -> (distribution, arguments)
    seeds: list[int] = field(default_factory=lambda: [0])
    samples: int = 1

    @property
    def trials(self) -> int:
        count = len(self.seeds) * self.samples
        for values in self.grid.values():
            count *= len(values)
        return count

    def tune_space(self) -> dict:
        """Ray Tune's ``param_space``: ``{"overrides": {key: grid_search | distribution}, "seed": grid_search}``."""
        from ray import tune

        overrides = {key: tune.grid_search(values) for key, values in self.grid.items()}
        for key, (distribution, arguments) in self.sampled.items():
            overrides[key] = getattr(tune, distribution)(*arguments) if distribution != "choice" \
                else tune.choice(arguments)
        return {"overrides": overrides, "seed": tune.grid_search(self.seeds)}


def _key_value(text: str, flag: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][\w.]*", key) or not value:
        raise ConfigError(f"{flag} {text!r}: write KEY=VALUES, e.g. {flag} algorithm.lr=[1e-4,3e-4]")
    if key == "seed":
        raise ConfigError(f"{flag} {text!r}: seeds are swept with --seeds N (or --seeds 0,5,9)")
    return key, value


_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)$")


def _numbers(value):
    """YAML 1.1 reads ``1e-4`` (no dot) as a string; the config loader reads it as a float, and so does this."""
    if isinstance(value, list):
        return [_numbers(item) for item in value]
    if isinstance(value, dict):
        return {key: _numbers(item) for key, item in value.items()}
    return float(value) if isinstance(value, str) and _FLOAT.match(value) else value


def _yaml(text: str, flag: str, whole: str):
    try:
        return _numbers(yaml.safe_load(text))
    except yaml.YAMLError:
        raise ConfigError(f"{flag} {whole!r}: {text!r} is not a YAML value") from None


def parse_grid(items: list[str]) -> dict[str, list]:
    grid = {}
    for item in items:
        key, text = _key_value(item, "--grid")
        values = _yaml(text, "--grid", item)
        values = values if isinstance(values, list) else [values]
        if not values:
            raise ConfigError(f"--grid {item!r}: no values; allowed: a list of one or more values")
        grid[key] = values
    return grid


def parse_sampled(items: list[str]) -> dict[str, tuple]:
    sampled = {}
    for item in items:
        key, text = _key_value(item, "--sample")
        distribution, _, rest = text.partition(":")
        if distribution not in DISTRIBUTIONS:
            raise ConfigError(f"--sample {item!r}: distribution {distribution!r}; allowed: "
                              f"{', '.join(DISTRIBUTIONS)} (e.g. loguniform:1e-5:1e-3, choice:[32,64])")
        if distribution == "choice":
            values = _yaml(rest, "--sample", item)
            if not isinstance(values, list) or not values:
                raise ConfigError(f"--sample {item!r}: choice needs a list, e.g. choice:[32,64]")
            sampled[key] = (distribution, values)
            continue
        bounds = rest.split(":")
        try:
            low, high = (int(b) for b in bounds) if distribution == "randint" else (float(b) for b in bounds)
        except ValueError:
            raise ConfigError(f"--sample {item!r}: write {distribution}:LOW:HIGH with numbers") from None
        if not low < high or (distribution == "loguniform" and low <= 0):
            positive = " and LOW > 0" if distribution == "loguniform" else ""
            raise ConfigError(f"--sample {item!r}: needs LOW < HIGH{positive}")
        sampled[key] = (distribution, (low, high))
    return sampled


def parse_seeds(text: str) -> list[int]:
    try:
        if "," in text:
            seeds = [int(part) for part in text.split(",")]
        else:
            seeds = list(range(int(text)))
    except ValueError:
        seeds = []
    if not seeds or any(seed < 0 for seed in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r}: allowed: a count >= 1 (seeds 0..N-1) or distinct seeds >= 0 "
                          "separated by commas")
    return seeds


def build_space(grid: list[str], sample: list[str], seeds: str, samples: int) -> SearchSpace:
    if samples < 1:
        raise ConfigError(f"--samples={samples}: allowed: an integer >= 1")
    space = SearchSpace(parse_grid(grid), parse_sampled(sample), parse_seeds(seeds), samples)
    both = set(space.grid) & set(space.sampled)
    if both:
        raise ConfigError(f"{sorted(both)[0]}: given to both --grid and --sample; allowed: one of them")
    if samples > 1 and not space.sampled:
        raise ConfigError(f"--samples={samples} without --sample: a grid runs each point once; drop --samples or "
                          "add --sample KEY=DISTRIBUTION")
    return space


def override_text(key: str, value) -> str:
    """``key=value`` as the config loader reads it (YAML flow for lists and dicts)."""
    if isinstance(value, (list, dict)):
        return f"{key}={yaml.safe_dump(value, default_flow_style=True).strip()}"
    if isinstance(value, float):
        return f"{key}={value!r}"
    return f"{key}={value}"


def trial_name(index: int, overrides: dict, seed: int) -> str:
    """``trial003-lr=0.0003-seed=1``: the trial's number, its values (last part of each key) and seed, file-safe."""
    parts = [f"{key.rsplit('.', 1)[-1]}={value:.3g}" if isinstance(value, float)
             else f"{key.rsplit('.', 1)[-1]}={value}" for key, value in overrides.items()]
    text = "-".join([f"trial{index:03d}", *parts, f"seed={seed}"])
    return re.sub(r"[^A-Za-z0-9=.,_+-]+", "_", text)[:120]
