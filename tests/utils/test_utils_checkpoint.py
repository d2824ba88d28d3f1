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
    weights = _weights(0)
    path = ckpt.save_checkpoint(tmp_path, 3, weights, b"state", {"iteration": 3, "env_steps": 99}, "task: x\n", 2)
    assert path.name == "iter_000003" and (path / "model.safetensors").is_file()
    loaded = ckpt.load_checkpoint(tmp_path.parent / tmp_path.name / "iter_000003")
    assert loaded.counters == {"iteration": 3, "env_steps": 99}
    assert loaded.trainer_state == b"state"
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
