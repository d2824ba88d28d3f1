import io
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from embodied_rl.models import build_policy
from embodied_rl.utils import checkpoint as ckpt
from embodied_rl.utils.atomic import sweep_publish_leftovers, write_text_atomic


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
    policy.load_state_dict(dict(loaded.weights))  # tensors of the dtype they were saved in


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


def _save(directory, iteration, keep_last=10, stopped=False, seed=None):
    counters = {"iteration": iteration, **({"interrupted": True, "stop_reason": "interrupt"} if stopped else {})}
    return ckpt.save_checkpoint(directory, iteration, _weights(iteration if seed is None else seed),
                                _actor_like_state(0), counters, "", keep_last,
                                env_state=None if stopped else [{"episodes": iteration}], stopped=stopped)


def _tree_bytes(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_a_stop_checkpoint_never_replaces_or_rotates_out_a_clean_one(tmp_path):
    run = tmp_path
    checkpoints = run / "checkpoints"
    clean5 = _save(checkpoints, 5, keep_last=1)
    before = _tree_bytes(clean5)
    stop5 = _save(checkpoints, 5, keep_last=1, stopped=True, seed=99)  # Ctrl-C during iteration 6
    assert stop5.name == "interrupted_iter_000005" and _tree_bytes(clean5) == before
    assert (clean5 / "env_state.json").is_file() and not (stop5 / "env_state.json").exists()
    # a tie goes to the clean one: exact resume needs its env states
    assert ckpt.load_checkpoint(run).path == clean5
    assert [p.name for p in ckpt.newest_first(checkpoints)] == ["iter_000005", "interrupted_iter_000005"]
    # a stop checkpoint of a later iteration than every clean one is strictly more training: it is used
    stop7 = _save(checkpoints, 7, keep_last=1, stopped=True)
    assert ckpt.load_checkpoint(run).path == stop7 and ckpt.resolve_checkpoint(checkpoints) == stop7
    assert ckpt.list_checkpoints(checkpoints) == [clean5]  # keep_last=1 counts clean checkpoints only
    # a clean save rotates clean ones (keep_last) and removes the stop checkpoints it supersedes, no others
    clean6 = _save(checkpoints, 6, keep_last=1)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["interrupted_iter_000007", "iter_000006"]
    assert ckpt.load_checkpoint(run).path == stop7
    clean8 = _save(checkpoints, 8, keep_last=1)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["iter_000008"]
    assert ckpt.load_checkpoint(run).path == clean8 and not clean6.exists()
    assert ckpt.has_checkpoint(checkpoints) and not ckpt.has_checkpoint(tmp_path / "nowhere")


def test_a_run_with_only_a_stop_checkpoint_resolves_to_it_and_a_corrupt_one_falls_back(tmp_path, capsys):
    checkpoints = tmp_path / "checkpoints"
    clean = _save(checkpoints, 2)
    stop = _save(checkpoints, 4, stopped=True)
    (stop / "model.safetensors").write_bytes(b"cut")
    assert ckpt.load_checkpoint(tmp_path).path == clean
    assert "interrupted_iter_000004 cannot be read" in capsys.readouterr().err


def _record_fsyncs(monkeypatch) -> list:
    """(path, whether it existed under its final name) of every os.fsync call."""
    calls = []
    real = os.fsync

    def fsync(fd):
        calls.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_a_checkpoint_fsyncs_its_files_its_directory_and_the_rename(tmp_path, monkeypatch):
    checkpoints = tmp_path / "checkpoints"
    _save(checkpoints, 1)
    calls = _record_fsyncs(monkeypatch)
    final = _save(checkpoints, 2)
    staged = [p for p in calls if p.parent.name.startswith(".staging-")]
    assert sorted(p.name for p in staged) == sorted(p.name for p in final.iterdir())  # each file once
    assert any(p.name.startswith(".staging-") and p.parent == checkpoints for p in calls)  # the directory's entries
    assert calls[-1] == checkpoints  # the rename, last
    assert len(calls) == len(list(final.iterdir())) + 2  # cheap: nothing else


def test_write_text_atomic_fsyncs_the_file_and_its_directory(tmp_path, monkeypatch):
    calls = _record_fsyncs(monkeypatch)
    write_text_atomic(tmp_path / "config.yaml", "a: 1\n")
    assert len(calls) == 2 and calls[0].parent == tmp_path and calls[1] == tmp_path


def test_an_interrupt_between_the_two_renames_of_a_replace_keeps_the_old_directory(tmp_path, monkeypatch):
    final = _save(tmp_path, 3)
    before = _tree_bytes(final)
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path, 3, seed=7)
    monkeypatch.setattr(os, "replace", real)
    assert _tree_bytes(final) == before and [p.name for p in tmp_path.iterdir()] == ["iter_000003"]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_leftovers_of_crashed_saves_are_swept(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    kept = _save(checkpoints, 1)
    dead = checkpoints / f".staging-{_dead_pid()}-abc"
    live = checkpoints / f".staging-{os.getppid()}-def"  # a live writer's save in progress
    stale = checkpoints / f".staging-{os.getppid()}-old"  # live pid but older than any save: pid reused
    unnamed = checkpoints / ".staging-xyz"  # the name of earlier versions (no pid): its age decides
    for leftover in (dead, live, stale, unnamed):
        leftover.mkdir()
        (leftover / "model.safetensors").write_bytes(b"half")
    an_hour_ago = time.time() - 3600
    os.utime(stale, (an_hour_ago, an_hour_ago))
    shutil.copytree(kept, checkpoints / ".iter_000002.old")  # killed between a replace's renames: restored
    shutil.copytree(kept, checkpoints / ".iter_000001.old")  # the replace finished: removed
    shutil.copytree(kept, checkpoints / ".deleting-iter_000000")  # killed mid-rotation: removed
    done = sweep_publish_leftovers(checkpoints)
    assert sorted(p.name for p in checkpoints.iterdir()) == sorted(
        [live.name, unnamed.name, "iter_000001", "iter_000002"])
    assert "restored iter_000002 from .iter_000002.old" in done and len(done) == 5
    assert ckpt.load_checkpoint(checkpoints / "iter_000002").counters == {"iteration": 1}
