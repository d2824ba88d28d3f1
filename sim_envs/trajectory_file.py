"""Episodes written in ManiSkill's trajectory format by families that have no recorder of their own.

``<name>.h5``: ``traj_<i>/obs`` (``[T + 1, D]`` float32 for state; a group ``obs/{state [T + 1, D], rgb
[T + 1, H, W, 3]}`` for camera observations, as our env adapters flatten them), ``actions [T, A]`` float32,
``rewards [T]`` float32, ``success``, ``terminated``, ``truncated`` ``[T]`` bool. ``<name>.json``: ``env_info``
(``env_id``, ``env_kwargs``, ``max_episode_steps``), ``source_type``, ``source_desc`` and ``episodes`` (one dict
each: ``episode_id``, ``episode_seed``, ``reset_kwargs``, ``control_mode``, ``elapsed_steps``, ``success``).
``embodied_rl.demos.load_demos`` reads it as it reads ManiSkill's own files.

Episodes are appended as they are kept; the ``.json`` is rewritten atomically (temp file + rename) after each,
so the pair on disk always agrees on the episodes written so far.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np


class TrajectoryWriter:
    def __init__(self, directory: Path, name: str, env_info: dict, source_type: str, source_desc: str):
        import h5py

        self.h5_path = Path(directory) / f"{name}.h5"
        self.json_path = self.h5_path.with_suffix(".json")
        self.file = h5py.File(self.h5_path, "w")
        self.meta = {"env_info": env_info, "source_type": source_type, "source_desc": source_desc, "episodes": []}
        self._write_json()

    @property
    def written(self) -> int:
        return len(self.meta["episodes"])

    def add_episode(self, seed: int, observations: list, actions: np.ndarray, rewards: np.ndarray,
                    success: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> dict:
        """Append one episode: ``observations`` the T + 1 observations (arrays ``[D]`` or dicts of arrays), the
        other arguments ``[T, ...]``. Returns its ``episodes`` entry."""
        index = self.written
        group = self.file.create_group(f"traj_{index}")
        if isinstance(observations[0], dict):
            obs = group.create_group("obs")
            for key in observations[0]:
                obs.create_dataset(key, data=np.stack([o[key] for o in observations]))
        else:
            group.create_dataset("obs", data=np.stack(observations).astype(np.float32))
        group.create_dataset("actions", data=np.asarray(actions, np.float32))
        group.create_dataset("rewards", data=np.asarray(rewards, np.float32))
        for key, value in (("success", success), ("terminated", terminated), ("truncated", truncated)):
            group.create_dataset(key, data=np.asarray(value, bool))
        self.file.flush()
        entry = {"episode_id": index, "episode_seed": int(seed), "reset_kwargs": {"seed": int(seed)},
                 "control_mode": self.meta["env_info"]["env_kwargs"].get("control_mode", ""),
                 "elapsed_steps": int(len(actions)), "success": bool(np.asarray(success)[-1]) if len(actions)
                 else False}
        self.meta["episodes"].append(entry)
        self._write_json()
        return entry

    def _write_json(self) -> None:
        handle, temp = tempfile.mkstemp(dir=self.json_path.parent, prefix=f".{self.json_path.name}.")
        with os.fdopen(handle, "w") as out:
            json.dump(self.meta, out, indent=2)
        os.replace(temp, self.json_path)

    def close(self) -> None:
        self.file.close()


def record_episode(env, act, seed: int, writer: TrajectoryWriter, keep_failures: bool):
    """Run one episode of a single env (``sim_envs/in_process.py`` ``SingleEnv``) from ``seed`` with ``act(obs) ->
    action [A]`` (clipped to ``env.action_low``/``action_high``) until it terminates or is truncated; write it to
    ``writer`` if it succeeded or ``keep_failures``. Returns its ``DemoEpisode``."""
    import time

    from sim_envs.families import DemoEpisode, EpisodeOutcome

    started = time.perf_counter()
    obs = env.reset(seed)
    observations, actions, rewards, success, terminated, truncated = [obs], [], [], [], [], []
    while True:
        action = np.clip(np.asarray(act(obs), np.float32), env.action_low, env.action_high)
        obs, reward, ended, cut, solved = env.step(action)
        for column, value in ((observations, obs), (actions, action), (rewards, reward),
                              (success, solved), (terminated, ended), (truncated, cut)):
            column.append(value)
        if ended or cut:
            break
    outcome = EpisodeOutcome(int(seed), bool(success[-1]), len(actions), time.perf_counter() - started)
    if not (outcome.success or keep_failures):
        return DemoEpisode(outcome, None)
    writer.add_episode(seed, observations, np.stack(actions), np.asarray(rewards), np.asarray(success),
                       np.asarray(terminated), np.asarray(truncated))
    return DemoEpisode(outcome, outcome)
