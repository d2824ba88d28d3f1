"""Episodes recorded in ManiSkill's own trajectory format, through ManiSkill's ``RecordEpisode`` wrapper.

A recorder holds one CPU env built exactly as ``sim_envs.make`` builds it (same obs, control and reward modes, so
recorded observations are what our env adapter returns) and writes ``<name>.h5`` + ``<name>.json`` in ``directory``:
``traj_<i>/{obs, actions, rewards, success, terminated, truncated, env_states}`` and ``env_info`` / ``episodes``.
ManiSkill's ``replay_trajectory`` and ``ManiSkillTrajectoryDataset`` read the files as they read their own.

An episode is buffered while it runs; ``keep()`` appends it to the file, ``discard()`` drops it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import numpy as np

from sim_envs.families import EpisodeOutcome  # noqa: F401  (re-exported: the planner and replay use it)
from sim_envs.maniskill.options import ManiSkillOptions, quiet_maniskill, translate_simulator_error
from sim_envs.maniskill.rewards import build_env


class EpisodeRecorder:
    """One ManiSkill CPU env wrapped in ``RecordEpisode``, writing ``directory/name.{h5,json}``."""

    def __init__(self, env_id: str, options: ManiSkillOptions, directory: Path, name: str,
                 source_type: str | None = None, source_desc: str | None = None):
        quiet_maniskill()
        from mani_skill.utils.wrappers.record import RecordEpisode

        self.env_id = env_id
        self.options = options
        self.h5_path = Path(directory) / f"{name}.h5"
        env = build_env(env_id, options)
        self.env = RecordEpisode(env, output_dir=str(directory), trajectory_name=name, save_video=False,
                                 save_on_reset=False, record_reward=True, source_type=source_type,
                                 source_desc=source_desc)
        space = env.unwrapped.single_action_space
        self.action_low, self.action_high = space.low, space.high
        self.kept = 0

    @property
    def base_env(self):
        return self.env.unwrapped

    @property
    def trajectories(self):
        """The open ``.h5`` file being written (readable in this process: ``trajectories['traj_0/actions']``)."""
        return self.env._h5_file

    @property
    def episodes(self) -> list[dict]:
        """The ``episodes`` list of the ``.json`` so far (one dict per kept episode), as the file has it."""
        return _as_json(self.env._json_data["episodes"])

    @property
    def written(self) -> int:
        """Episodes written to the file so far."""
        return len(self.env._json_data["episodes"])

    @property
    def last_episode(self) -> dict | None:
        """The ``episodes`` entry of the last episode written."""
        return _as_json(self.env._json_data["episodes"][-1]) if self.written else None

    @property
    def metadata(self) -> dict:
        """The ``.json`` so far less its episodes: ``env_info`` (env id, env kwargs, time limit: what a replay
        needs to rebuild the env), ``source_type``, ``source_desc``."""
        return _as_json({k: v for k, v in self.env._json_data.items() if k != "episodes"})

    def reset(self, seed: int):
        try:
            obs, _ = self.env.reset(seed=int(seed))
        except RuntimeError as error:
            raise translate_simulator_error(error) from error
        return _first(obs)

    def keep(self) -> dict | None:
        """Append the buffered episode to the file; returns its ``episodes`` entry (None: it had no step)."""
        if self.env._trajectory_buffer is None:
            return None
        before = self.written
        self.env.flush_trajectory(save=True)
        if self.written == before:
            return None
        self.kept += 1
        return self.last_episode

    def discard(self) -> None:
        if self.env._trajectory_buffer is not None:
            self.env.flush_trajectory(save=False)

    def run_policy_episode(self, seed: int, act: Callable[[np.ndarray], np.ndarray]) -> EpisodeOutcome:
        """Reset with ``seed`` and step ``act(obs [D]) -> action [A]`` (clipped to the action space, as our env
        adapter does) until the episode terminates or is truncated. The episode stays buffered: keep or discard."""
        started = time.perf_counter()
        obs = self.reset(seed)
        steps, success = 0, False
        while True:
            action = np.clip(np.asarray(act(obs), np.float32), self.action_low, self.action_high)
            obs, _, terminated, truncated, info = self.env.step(action[None])
            obs, steps = _first(obs), steps + 1
            success = bool(_scalar(info.get("success", False)))
            if _scalar(terminated) or _scalar(truncated):
                break
        return EpisodeOutcome(int(seed), success, steps, time.perf_counter() - started)

    def close(self) -> None:
        """Close the env and finish the files (ManiSkill renumbers kept episodes ``traj_0..`` on close)."""
        self.env.close()


def _as_json(data):
    """``data`` as it reads back from the ``.json`` (RecordEpisode keeps numpy values in memory, e.g. ``None``
    as a 0-d object array, which ``env.reset(**reset_kwargs)`` cannot take)."""
    from mani_skill.utils.io_utils import CustomJsonEncoder

    return json.loads(json.dumps(data, cls=CustomJsonEncoder))


def _scalar(value) -> bool:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return bool(np.asarray(value).reshape(-1)[0])


def _first(obs):
    """Row 0 of a batched observation (tensor or dict of tensors) as numpy."""
    if isinstance(obs, dict):
        return {key: _first(value) for key, value in obs.items()}
    if hasattr(obs, "detach"):
        obs = obs.detach().cpu().numpy()
    return np.asarray(obs)[0]
