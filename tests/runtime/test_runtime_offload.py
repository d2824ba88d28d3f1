"""Offloading a module and its optimizer state: a bookkeeping-only no-op on CPU, a real move on a GPU."""

import copy

import pytest
import torch

from embodied_rl.runtime.offload import Offloader


def _trained(device: str, seed: int = 0):
    """A small model, one Adam step taken (so gradients and optimizer state exist), on ``device``."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.BatchNorm1d(256), torch.nn.Linear(256, 8)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    _step(model, optimizer, device)
    return model, optimizer


def _step(model, optimizer, device):
    inputs = torch.linspace(-1, 1, 32 * 64, device=device).reshape(32, 64)
    optimizer.zero_grad(set_to_none=False)  # keeps the gradient tensors (zeroed), so they are there to be offloaded
    model(inputs).square().mean().backward()
    optimizer.step()


def _snapshot(model, optimizer) -> dict:
    """Every value (weights, buffers, gradients, optimizer state) as CPU copies."""
    return {"model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
            "grads": [p.grad.detach().cpu().clone() for p in model.parameters()],
            "optimizer": copy.deepcopy({i: {k: v.cpu() if torch.is_tensor(v) else v for k, v in s.items()}
                                        for i, s in optimizer.state_dict()["state"].items()})}


def _assert_bit_exact(before: dict, after: dict):
    assert before["model"].keys() == after["model"].keys()
    for key in before["model"]:
        assert torch.equal(before["model"][key], after["model"][key]), key
    assert all(torch.equal(a, b) for a, b in zip(before["grads"], after["grads"]))
    for index, state in before["optimizer"].items():
        for key, value in state.items():
            assert torch.equal(value, after["optimizer"][index][key]), (index, key)


def test_on_cpu_offload_moves_nothing_but_keeps_the_bookkeeping():
    model, optimizer = _trained("cpu")
    before = _snapshot(model, optimizer)
    pointers = [p.data_ptr() for p in model.parameters()]
    offloader = Offloader([model], [optimizer])
    report = offloader.offload()
    assert (report.bytes, report.location, offloader.offloaded) == (0, "host", True)
    assert offloader.offload().bytes == 0 and offloader.offloads == 1  # idempotent
    assert [p.data_ptr() for p in model.parameters()] == pointers  # no copy was made
    report = offloader.onload()
    assert (report.bytes, report.location, offloader.offloaded, offloader.onloads) == (0, "device", False, 1)
    _assert_bit_exact(before, _snapshot(model, optimizer))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device to offload from")
def test_on_gpu_offload_frees_device_memory_and_onload_restores_exact_values():
    model, optimizer = _trained("cuda")
    twin_model, twin_optimizer = _trained("cuda")  # same seed, never offloaded
    before = _snapshot(model, optimizer)
    parameters = list(model.parameters())
    step_devices = [s["step"].device for s in optimizer.state.values()]
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated()
    offloader = Offloader([model], [optimizer])

    report = offloader.offload()
    tensors = sum(p.numel() * 4 * 2 for p in parameters)  # weights and gradients, float32
    tensors += sum(v.numel() * 4 for s in optimizer.state.values() for k, v in s.items() if k != "step")
    assert report.bytes >= tensors  # (+ BatchNorm buffers)
    assert allocated - torch.cuda.memory_allocated() >= tensors
    assert all(p.device.type == "cpu" and p.is_pinned() for p in model.parameters())
    assert all(v.device.type == "cpu" for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))

    assert offloader.onload().bytes == report.bytes
    assert torch.cuda.memory_allocated() == allocated
    assert all(p.device.type == "cuda" for p in model.parameters())
    assert [id(p) for p in model.parameters()] == [id(p) for p in parameters]  # the optimizer's parameters
    _assert_bit_exact(before, _snapshot(model, optimizer))
    # Adam keeps its step counter on the CPU unless capturable or fused: onload puts it back where it was.
    assert [s["step"].device for s in optimizer.state.values()] == step_devices

    _step(model, optimizer, "cuda")  # training goes on as if nothing happened
    _step(twin_model, twin_optimizer, "cuda")
    _assert_bit_exact(_snapshot(twin_model, twin_optimizer), _snapshot(model, optimizer))
