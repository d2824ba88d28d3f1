"""Weight sync: after the first full sync only trained weights travel; frozen ones stay as they are; weights leave
a worker and reach a checkpoint in their own dtype (bf16 included) and come back bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embodied_rl.utils.checkpoint import load_checkpoint, save_checkpoint
from embodied_rl.workers.weights import host_weights, load_host_weights, trained_names


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
    load_host_weights(receiver, host_weights(source))  # first sync: everything
    with torch.no_grad():
        source[1].weight.add_(1.0)
        source.obs_mean.fill_(2.0)
    partial = host_weights(source, only_trained=True)
    assert set(partial) == {"1.weight", "1.bias", "obs_mean"}
    load_host_weights(receiver, partial)
    for name, value in source.state_dict().items():
        np.testing.assert_array_equal(receiver.state_dict()[name].numpy(), value.numpy())


def test_weights_missing_a_trained_entry_or_naming_an_unknown_one_are_refused():
    model = _model(0)
    weights = host_weights(model)
    with pytest.raises(KeyError, match="missing trained"):
        load_host_weights(model, {k: v for k, v in weights.items() if k != "1.bias"})
    with pytest.raises(KeyError, match="unknown"):
        load_host_weights(model, dict(weights, extra=np.zeros(1)))


def _mixed_precision_model() -> torch.nn.Module:
    """A frozen bf16 base and an fp32 trained head, as a VLA keeps them with ``dtype=bfloat16``."""
    model = _model(0)
    model[0].to(torch.bfloat16)
    return model


def test_bf16_weights_leave_as_bf16_tensors_of_their_own_storage():
    model = _mixed_precision_model()
    weights = host_weights(model)
    assert weights["0.weight"].dtype == torch.bfloat16 and weights["1.weight"].dtype == torch.float32
    assert weights["0.weight"].data_ptr() != model[0].weight.data_ptr()  # a copy: later updates do not leak in


def test_bf16_weights_go_through_a_checkpoint_and_back_bit_for_bit(tmp_path):
    source = _mixed_precision_model()
    with torch.no_grad():
        source[0].weight.add_(0.001)  # bf16 values that are not fp32 values rounded by accident
    path = save_checkpoint(tmp_path / "checkpoints", 1, host_weights(source), b"", {}, "", keep_last=1)
    loaded = load_checkpoint(path).weights
    assert loaded["0.weight"].dtype == torch.bfloat16
    receiver = _mixed_precision_model()
    load_host_weights(receiver, loaded)
    for name, value in source.state_dict().items():
        assert torch.equal(receiver.state_dict()[name], value), name


def test_a_checkpoint_of_numpy_weights_still_loads(tmp_path):
    source = _model(3)
    arrays = {k: v.numpy().copy() for k, v in source.state_dict().items()}
    path = save_checkpoint(tmp_path / "checkpoints", 1, arrays, b"", {}, "", keep_last=1)
    receiver = _model(4)
    load_host_weights(receiver, load_checkpoint(path).weights)
    assert torch.equal(receiver[1].weight, source[1].weight)


def test_bf16_sent_to_an_fp32_receiver_is_cast_on_arrival():
    source, receiver = _mixed_precision_model(), _model(1)
    load_host_weights(receiver, host_weights(source))
    assert receiver[0].weight.dtype == torch.float32
    assert torch.equal(receiver[0].weight, source[0].weight.float())
