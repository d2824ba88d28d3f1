"""Demonstrations in ManiSkill's trajectory format (``.h5`` + ``.json``) as flat numpy arrays for training.

Every step of every episode becomes one row; ``N`` is the total number of steps (actions), ``E`` the number of
episodes. The observation of a row is the one its action was chosen from (an episode of ``T`` actions stores
``T + 1`` observations; the last is dropped, as ManiSkill's ``ManiSkillTrajectoryDataset`` does).

Observation layouts read: a flat vector ``traj_i/obs`` (obs_mode ``state``); ``traj_i/obs/{state, rgb}``
(our ``rgb`` and ``state+rgb`` demos, flattened as our env adapter flattens them); and ManiSkill's unflattened
dict (``obs/agent/...``, ``obs/extra/...``, ``obs/sensor_data/<camera>/rgb``), flattened the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from embodied_rl.demos.cache import MANIFEST_FILE


@dataclass
class DemoDataset:
    obs: np.ndarray
    """``[N, D]`` float32: the state vector each action was chosen from."""
    actions: np.ndarray
    """``[N, A]`` float32, in ``control_mode``."""
    episode_index: np.ndarray
    """``[N]`` int64: the row's episode, ``0..E-1`` in file order; an episode's rows are contiguous."""
    step_index: np.ndarray
    """``[N]`` int64: the row's step within its episode, ``0..T_e-1``."""
    rgb: np.ndarray | None = None
    """``[N, H, W, 3 * cameras]`` uint8 when the demos recorded cameras."""
    rewards: np.ndarray | None = None
    """``[N]`` float32: reward after the step (the env's reward mode)."""
    success: np.ndarray | None = None
    """``[N]`` bool: the task is solved after the step."""
    episode_seeds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """``[E]`` int64: the reset seed of each episode (``env.reset(seed=...)`` reproduces its start)."""
    env_id: str = ""
    control_mode: str = ""
    obs_mode: str = ""

    @property
    def num_steps(self) -> int:
        return len(self.actions)

    @property
    def num_episodes(self) -> int:
        return len(self.episode_seeds)

    @property
    def episode_lengths(self) -> np.ndarray:
        """``[E]`` int64: steps of each episode."""
        return np.bincount(self.episode_index, minlength=self.num_episodes).astype(np.int64)

    def action_chunks(self, chunk_size: int) -> tuple[np.ndarray, np.ndarray]:
        """For each row, its action and the next ``chunk_size - 1`` of its episode; see ``action_chunks``."""
        return action_chunks(self.actions, self.episode_index, chunk_size)


def action_chunks(actions: np.ndarray, episode_index: np.ndarray, chunk_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Action chunks: ``chunks[i, k] = actions[i + k]`` while row ``i + k`` is in row ``i``'s episode.

    Past the episode's end the chunk repeats the episode's last action and ``mask`` is False there.

    Args:
        actions: ``[N, A]``.
        episode_index: ``[N]``, each episode's rows contiguous.
        chunk_size: ``K >= 1``.
    Returns:
        chunks ``[N, K, A]`` (dtype of ``actions``), mask ``[N, K]`` bool (True: a real action of the episode).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    episode_index = np.asarray(episode_index)
    n = len(actions)
    if n == 0:
        return np.zeros((0, chunk_size, *np.shape(actions)[1:]), np.asarray(actions).dtype), np.zeros((0, chunk_size),
                                                                                                      bool)
    # Last row of each row's episode: rows where the episode changes next, carried back over the episode.
    is_last = np.append(episode_index[1:] != episode_index[:-1], True)
    last_rows = np.flatnonzero(is_last)
    episode_end = last_rows[np.searchsorted(last_rows, np.arange(n))]
    wanted = np.arange(n)[:, None] + np.arange(chunk_size)[None, :]
    mask = wanted <= episode_end[:, None]
    rows = np.minimum(wanted, episode_end[:, None])
    return np.asarray(actions)[rows], mask


def find_trajectory(path: str | Path) -> Path:
    """The ``.h5`` of ``path``: the file itself, or in a directory the one its manifest names (or the only one)."""
    path = Path(path)
    if path.is_file():
        return path
    if (path / MANIFEST_FILE).is_file():
        return path / json.loads((path / MANIFEST_FILE).read_text())["trajectory"]
    files = sorted(path.glob("*.h5")) if path.is_dir() else []
    if len(files) == 1:
        return files[0]
    if not files:
        raise FileNotFoundError(f"no demonstrations at {path} (expected a .h5 file or a directory with one)")
    raise FileNotFoundError(f"{path} holds several .h5 files and no {MANIFEST_FILE}; pass one of them")


def load_demos(path: str | Path, max_episodes: int | None = None, success_only: bool = False) -> DemoDataset:
    """Read a ManiSkill ``.h5`` + ``.json`` pair (or a demos directory) into a ``DemoDataset``.

    ``max_episodes``: the first this many episodes (after ``success_only`` filtering); ``success_only``: skip
    episodes whose ``.json`` entry says they did not end in success."""
    import h5py

    h5_path = find_trajectory(path)
    meta = json.loads(h5_path.with_suffix(".json").read_text())
    episodes = meta["episodes"]
    if success_only:
        episodes = [e for e in episodes if e.get("success", False)]
    if max_episodes is not None:
        episodes = episodes[:max_episodes]
    columns: dict[str, list] = {"obs": [], "rgb": [], "actions": [], "rewards": [], "success": []}
    seeds, lengths = [], []
    with h5py.File(h5_path, "r") as file:
        for episode in episodes:
            group = file[f"traj_{episode['episode_id']}"]
            actions = np.asarray(group["actions"][:], np.float32)
            steps = len(actions)
            state, rgb = _observations(group["obs"], steps)
            columns["obs"].append(state)
            columns["rgb"].append(rgb)
            columns["actions"].append(actions.reshape(steps, -1))
            columns["rewards"].append(np.asarray(group["rewards"][:], np.float32) if "rewards" in group else None)
            columns["success"].append(np.asarray(group["success"][:], bool) if "success" in group else None)
            seeds.append(int(episode.get("episode_seed", episode.get("reset_kwargs", {}).get("seed", -1))))
            lengths.append(steps)
    env_info = meta.get("env_info") or {}
    control_mode = (episodes[0].get("control_mode") if episodes else None) or \
        env_info.get("env_kwargs", {}).get("control_mode", "")
    lengths = np.asarray(lengths, np.int64)
    action_dim = columns["actions"][0].shape[1] if episodes else 0
    return DemoDataset(
        obs=_concat(columns["obs"], np.float32, (0, 0)),
        actions=_concat(columns["actions"], np.float32, (0, action_dim)),
        episode_index=np.repeat(np.arange(len(lengths), dtype=np.int64), lengths),
        step_index=np.concatenate([np.arange(t, dtype=np.int64) for t in lengths]) if len(lengths)
        else np.zeros(0, np.int64),
        rgb=_concat_optional(columns["rgb"], np.uint8),
        rewards=_concat_optional(columns["rewards"], np.float32),
        success=_concat_optional(columns["success"], bool),
        episode_seeds=np.asarray(seeds, np.int64),
        env_id=env_info.get("env_id", ""),
        control_mode=control_mode,
        obs_mode=env_info.get("env_kwargs", {}).get("obs_mode", ""),
    )


def _observations(obs, steps: int) -> tuple[np.ndarray, np.ndarray | None]:
    """State ``[T, D]`` float32 and rgb ``[T, H, W, C]`` uint8 (or None) of one trajectory's ``obs``."""
    import h5py

    if isinstance(obs, h5py.Dataset):
        return np.asarray(obs[:steps], np.float32).reshape(steps, -1), None
    if "state" in obs and isinstance(obs["state"], h5py.Dataset):
        state = np.asarray(obs["state"][:steps], np.float32).reshape(steps, -1)
    else:  # ManiSkill's unflattened dict: agent and extra leaves in stored order, as flatten_state_dict does
        leaves = [np.asarray(leaf[:steps], np.float32).reshape(steps, -1)
                  for key in ("agent", "extra") if key in obs for leaf in _leaves(obs[key])]
        state = np.concatenate(leaves, axis=1) if leaves else np.zeros((steps, 0), np.float32)
    if "rgb" in obs and isinstance(obs["rgb"], h5py.Dataset):
        return state, np.asarray(obs["rgb"][:steps])
    cameras = [obs["sensor_data"][name]["rgb"][:steps] for name in obs.get("sensor_data", {})
               if "rgb" in obs["sensor_data"][name]]
    return state, np.concatenate(cameras, axis=-1) if cameras else None


def _leaves(group):
    import h5py

    for key in group:
        item = group[key]
        if isinstance(item, h5py.Dataset):
            yield item
        else:
            yield from _leaves(item)


def _concat(parts: list, dtype, empty_shape) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(empty_shape, dtype)


def _concat_optional(parts: list, dtype) -> np.ndarray | None:
    if not parts or any(p is None for p in parts):
        return None
    return np.concatenate(parts).astype(dtype, copy=False)
