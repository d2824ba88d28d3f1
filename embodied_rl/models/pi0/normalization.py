"""Pi0's state / action normalisation statistics as published beside the weights.

Two layouts are read (the first found wins):

* transformers' ``PI0Processor`` (``models/pi0/processing_pi0.py``): ``processor_config.json`` holds
  ``state_mean``, ``state_std``, ``actions_mean``, ``actions_std``; the processor feeds the model
  ``(x - mean) / (std + 1e-8)`` for the state and for the action targets, so actions leave the model as
  ``x (std + 1e-8) + mean``.
* openpi (``src/openpi/shared/normalize.py``, ``src/openpi/transforms.py``): ``assets/<asset_id>/norm_stats.json``
  (or ``norm_stats.json`` at the top) holds ``{"norm_stats": {"state": {"mean", "std", "q01", "q99"}, "actions":
  {...}}}``; Pi0 uses the z-score ``(x - mean) / (std + 1e-6)`` (quantiles are for pi0-FAST / pi05) and
  ``Unnormalize`` inverts it. The first ``D`` entries apply to a ``D``-wide state (``mean[..., :D]``).

Each is returned as ``{"state": (offset, scale), "actions": (offset, scale)}`` with ``normalised = (x - offset) /
scale`` (the eps folded into ``scale``), the form of ``Pi0Policy``'s ``state_mean`` / ``state_std`` and
``action_offset`` / ``action_scale`` buffers. ``write_processor_statistics`` writes the transformers form back."""

from __future__ import annotations

import glob
import json
import os

import torch

PROCESSOR_FILE = "processor_config.json"
NORM_STATS_FILE = "norm_stats.json"
PROCESSOR_EPS, OPENPI_EPS = 1e-8, 1e-6


def _pair(mean, std, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    mean = torch.tensor(mean, dtype=torch.float64)
    return mean.float(), (torch.tensor(std, dtype=torch.float64) + eps).float()


def _from_processor(path: str) -> dict:
    with open(path) as f:
        values = json.load(f)
    out = {}
    for ours, theirs in (("state", "state"), ("actions", "actions")):
        if values.get(f"{theirs}_mean") is not None and values.get(f"{theirs}_std") is not None:
            out[ours] = _pair(values[f"{theirs}_mean"], values[f"{theirs}_std"], PROCESSOR_EPS)
    return out


def _from_openpi(path: str) -> dict:
    with open(path) as f:
        stats = json.load(f)["norm_stats"]
    return {key: _pair(stats[key]["mean"], stats[key]["std"], OPENPI_EPS)
            for key in ("state", "actions") if key in stats}


def read_statistics(directory: str) -> dict:
    """The checkpoint's statistics (``{}`` when it publishes none); ValueError (one line) when openpi assets hold
    several data sets, since nothing says which one the policy runs on."""
    processor = os.path.join(directory, PROCESSOR_FILE)
    if os.path.isfile(processor):
        found = _from_processor(processor)
        if found:
            return found
    candidates = sorted(glob.glob(os.path.join(directory, NORM_STATS_FILE))
                        + glob.glob(os.path.join(directory, "assets", "*", NORM_STATS_FILE)))
    if len(candidates) > 1:
        raise ValueError(f"pi0 checkpoint {directory!r} holds several {NORM_STATS_FILE} files "
                         f"{[os.path.relpath(c, directory) for c in candidates]}; allowed: exactly one")
    return _from_openpi(candidates[0]) if candidates else {}


def fit(name: str, stats: tuple[torch.Tensor, torch.Tensor], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``width`` entries of ``stats``; ValueError (one line) when it has fewer."""
    offset, scale = stats
    if len(offset) < width:
        raise ValueError(f"pi0 checkpoint: its {name} statistics have {len(offset)} dims, the env's {name} {width}")
    return offset[:width], scale[:width]


def write_processor_statistics(policy, directory: str) -> None:
    """Writes ``policy``'s statistics as transformers' ``PI0Processor`` config (``std = scale - 1e-8``, so
    reading them back gives the same ``scale``)."""
    def listed(tensor: torch.Tensor) -> list[float]:
        return tensor.detach().double().cpu().tolist()

    values = {"processor_class": "PI0Processor", "max_state_dim": policy.model_state_dim,
              "chunk_size": policy.action_chunk,
              "state_mean": listed(policy.state_mean), "state_std": listed(policy.state_std.double() - PROCESSOR_EPS),
              "actions_mean": listed(policy.action_offset),
              "actions_std": listed(policy.action_scale.double() - PROCESSOR_EPS)}
    with open(os.path.join(directory, PROCESSOR_FILE), "w") as f:
        json.dump(values, f, indent=1)
