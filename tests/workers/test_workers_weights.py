"""Weight sync: after the first full sync only trained weights travel; frozen ones stay as they are."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embodied_rl.workers.weights import load_numpy_weights, trained_names, weights_to_numpy


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    model.register_buffer("obs_mean", torch.zeros(3))
    for p in model[0].parameters():
        p.requires_grad_(False)  # a frozen base (as under LoRA)
    return model


def test_only_trained_weights_leave_out_the_frozen_base_and_load_into_a_synced_copy():
    source, receiver = _model(0), _model(1)
    assert trained_names(source) == {"1.weight", "1.bias", "obs_mean"}
    load_numpy_weights(receiver, weights_to_numpy(source))  # first sync: everything
    with torch.no_grad():
        source[1].weight.add_(1.0)
        source.obs_mean.fill_(2.0)
    partial = weights_to_numpy(source, only_trained=True)
    assert set(partial) == {"1.weight", "1.bias", "obs_mean"}
    load_numpy_weights(receiver, partial)
    for name, value in source.state_dict().items():
        np.testing.assert_array_equal(receiver.state_dict()[name].numpy(), value.numpy())


def test_weights_missing_a_trained_entry_or_naming_an_unknown_one_are_refused():
    model = _model(0)
    weights = weights_to_numpy(model)
    with pytest.raises(KeyError, match="missing trained"):
        load_numpy_weights(model, {k: v for k, v in weights.items() if k != "1.bias"})
    with pytest.raises(KeyError, match="unknown"):
        load_numpy_weights(model, dict(weights, extra=np.zeros(1)))
