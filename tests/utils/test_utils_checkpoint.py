import io
import pickle

import numpy as np
import pytest
import torch

from embodied_rl.models import build_policy
from embodied_rl.utils import checkpoint as ckpt


def _weights(seed):
    torch.manual_seed(seed)
    policy = build_policy("mlp", obs_dim=5, action_dim=2, hidden_sizes=[8])
    return {k: v.detach().numpy().copy() for k, v in policy.state_dict().items()}


def test_save_and_load_round_trip_in_safetensors(tmp_path):
    weights, state = _weights(0), _actor_like_state(0)
    path = ckpt.save_checkpoint(tmp_path, 3, weights, state, {"iteration": 3, "env_steps": 99}, "task: x\n", 2)
    assert path.name == "iter_000003" and (path / "model.safetensors").is_file()
    loaded = ckpt.load_checkpoint(tmp_path.parent / tmp_path.name / "iter_000003")
    assert loaded.counters == {"iteration": 3, "env_steps": 99}
    assert loaded.trainer_state == state
    for key, value in weights.items():
        np.testing.assert_array_equal(loaded.weights[key], value)
    # The weights load back into a fresh policy of the same shape.
    policy = build_policy("mlp", obs_dim=5, action_dim=2, hidden_sizes=[8])
    policy.load_state_dict({k: torch.from_numpy(v) for k, v in loaded.weights.items()})


def test_only_the_last_checkpoints_are_kept_and_a_run_dir_resolves_to_the_latest(tmp_path):
    for iteration in (1, 2, 3):
        ckpt.save_checkpoint(tmp_path / "checkpoints", iteration, _weights(iteration), b"", {"iteration": iteration},
                             "", keep_last=2)
    names = [p.name for p in ckpt.list_checkpoints(tmp_path / "checkpoints")]
    assert names == ["iter_000002", "iter_000003"]
    assert ckpt.load_checkpoint(tmp_path).counters["iteration"] == 3
    # a folder of checkpoints (checkpoints/ itself, or a run's best_checkpoint/) resolves to its latest too
    assert ckpt.resolve_checkpoint(tmp_path / "checkpoints").name == "iter_000003"
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        ckpt.load_checkpoint(tmp_path / "elsewhere")


def test_a_crash_while_saving_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    ckpt.save_checkpoint(tmp_path, 5, _weights(0), b"old", {"iteration": 5}, "", keep_last=3)
    before = (tmp_path / "iter_000005" / "model.safetensors").read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt, "save_file", crash)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save_checkpoint(tmp_path, 5, _weights(1), b"new", {"iteration": 5}, "", keep_last=3)
    assert (tmp_path / "iter_000005" / "model.safetensors").read_bytes() == before
    assert (tmp_path / "iter_000005" / "trainer_state.pt").read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["iter_000005"]  # no staging leftovers


def _actor_like_state(seed):
    """What the actor writes: optimizer state, RNG states and counters, through torch.save."""
    torch.manual_seed(seed)
    policy = build_policy("mlp", obs_dim=5, action_dim=2, hidden_sizes=[8])
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    for p in policy.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    buffer = io.BytesIO()
    torch.save({"optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
                "shuffle_rng": torch.Generator().get_state(), "policy_version": 3, "supervised_steps": 0}, buffer)
    return buffer.getvalue()


class _RunsCodeOnUnpickle:
    def __reduce__(self):
        return (print, ("this ran on load",))


def test_the_trainer_state_loads_without_unpickling_code():
    state = ckpt.read_trainer_state(_actor_like_state(0))
    assert state["policy_version"] == 3 and state["optimizer"]["param_groups"][0]["lr"] == 1e-3
    buffer = io.BytesIO()
    torch.save({"optimizer": _RunsCodeOnUnpickle()}, buffer)
    with pytest.raises(pickle.UnpicklingError):
        ckpt.read_trainer_state(buffer.getvalue())


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_with_a_warning(tmp_path, capsys):
    for iteration in (1, 2, 3):
        ckpt.save_checkpoint(tmp_path / "checkpoints", iteration, _weights(iteration), _actor_like_state(iteration),
                             {"iteration": iteration}, "", keep_last=3)
    newest = tmp_path / "checkpoints" / "iter_000003"
    weights = (newest / "model.safetensors").read_bytes()
    (newest / "model.safetensors").write_bytes(weights[: len(weights) // 2])  # truncated mid-write by a crash
    state_file = tmp_path / "checkpoints" / "iter_000002" / "trainer_state.pt"
    damaged = bytearray(state_file.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # one flipped bit pattern inside the archive: its CRC no longer matches
    state_file.write_bytes(bytes(damaged))
    loaded = ckpt.load_checkpoint(tmp_path)
    assert loaded.counters["iteration"] == 1
    warnings = capsys.readouterr().err
    assert "iter_000003 cannot be read" in warnings and "iter_000002 cannot be read" in warnings
    with pytest.raises(ckpt.CheckpointError, match="iter_000003 cannot be read"):
        ckpt.load_checkpoint(newest)  # named explicitly: no silent substitute
