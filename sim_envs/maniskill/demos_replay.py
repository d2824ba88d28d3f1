"""Recorded episodes replayed into another control mode and/or observation mode, with ManiSkill's own replay code.

Each episode is replayed by ``mani_skill.trajectory.replay_trajectory.replay_cpu_sim`` (the function behind
``python -m mani_skill.trajectory.replay_trajectory``): actions as they are when the control mode stays, or
converted step by step against a second env in the source control mode (``pd_joint_pos`` -> ``pd_joint_delta_pos``
and others; ``mani_skill.trajectory.utils.actions.conversion``). A conversion may take up to two target steps per
source step. The target env is built as ``sim_envs.make`` builds it, so the recorded observations are what our env
adapter returns; cameras render only here, never while planning.
"""

from __future__ import annotations

import contextlib
import copy
import io
import time
from pathlib import Path
from typing import Callable

from sim_envs.errors import TaskConfigError
from sim_envs.maniskill.options import ManiSkillOptions, quiet_maniskill, translate_simulator_error
from sim_envs.maniskill.recording import EpisodeOutcome, EpisodeRecorder

DEMO_OBSERVATIONS = ("state", "rgb")
"""What a demonstration may record: the flat state vector, camera images, or both."""

CONVERSIONS = {
    "pd_joint_pos": ("pd_joint_delta_pos", "pd_joint_target_delta_pos", "pd_joint_vel", "pd_ee_delta_pos",
                     "pd_ee_delta_pose", "pd_ee_target_delta_pos", "pd_ee_target_delta_pose", "pd_ee_pose"),
    "pd_joint_delta_pos": ("pd_joint_pos",),
}
"""Source control mode -> the target modes ManiSkill's converter supports (Panda)."""


def demo_obs_mode(observations) -> str:
    """``('state',)`` -> ``'state'`` (flat vector), ``('rgb',)`` -> ``'rgb'`` (images + proprioception, as
    ``sim_envs.make(obs_mode='rgb')``), both -> ``'state+rgb'`` (images + the full state vector)."""
    wanted = set(observations)
    unknown = wanted - set(DEMO_OBSERVATIONS)
    if not wanted or unknown:
        raise TaskConfigError(f"observations {','.join(observations) or '(none)'} are not supported; allowed: "
                              f"state, rgb, state,rgb")
    return "+".join(o for o in DEMO_OBSERVATIONS if o in wanted)


def check_conversion(source_control_mode: str, target_control_mode: str) -> None:
    """A TaskConfigError (one line, the allowed targets) unless ManiSkill can convert between the two."""
    if source_control_mode == target_control_mode:
        return
    allowed = CONVERSIONS.get(source_control_mode, ())
    if target_control_mode not in allowed:
        raise TaskConfigError(f"control mode {target_control_mode!r} cannot be converted from {source_control_mode!r} "
                              f"demonstrations; allowed: {', '.join((source_control_mode, *allowed))}")


class EpisodeReplayer:
    """Replays episodes of a source file into ``directory/name.{h5,json}`` with ``obs_mode`` and ``control_mode``.

    ``source_metadata`` is the source ``.json`` (its ``env_info``: env id, env kwargs, time limit; and
    ``source_type`` / ``source_desc``, carried over); its ``episodes`` are not read.
    """

    def __init__(self, source_metadata: dict, directory: Path, name: str, obs_mode: str, control_mode: str,
                 image_size: int = 64, reward_mode: str = "normalized_dense"):
        quiet_maniskill()
        import gymnasium as gym

        source_env_info = source_metadata["env_info"]
        self.env_id = source_env_info["env_id"]
        self.source_kwargs = dict(source_env_info["env_kwargs"])
        self.source_control_mode = self.source_kwargs.get("control_mode", "pd_joint_pos")
        check_conversion(self.source_control_mode, control_mode)
        self.control_mode = control_mode
        limit = int(source_env_info.get("max_episode_steps") or 200)
        converting = self.source_control_mode != control_mode
        options = ManiSkillOptions(obs_mode=obs_mode, control_mode=control_mode, reward_mode=reward_mode,
                                   max_episode_steps=2 * limit if converting else limit, image_size=image_size)
        self.recorder = EpisodeRecorder(self.env_id, options, directory, name, source_metadata.get("source_type"),
                                        source_metadata.get("source_desc"))
        self.source_env = None
        if converting:
            kwargs = dict(self.source_kwargs, sim_backend="physx_cpu", num_envs=1, max_episode_steps=limit)
            try:
                self.source_env = gym.make(self.env_id, **kwargs)
            except RuntimeError as error:
                raise translate_simulator_error(error) from error

    def replay(self, trajectories, episode: dict, keep_failures: bool = False) -> EpisodeOutcome | None:
        """Replay source ``episode`` (a ``.json`` ``episodes`` entry; its data in ``trajectories``, the source
        ``.h5``). The replayed episode is written if it ends in success (always with ``keep_failures``).
        Returns its outcome, or None when it was not written."""
        from mani_skill.trajectory import replay_trajectory

        args = replay_trajectory.Args(traj_path=str(getattr(trajectories, "filename", "")),
                                      target_control_mode=self.control_mode, save_traj=True, max_retry=0,
                                      allow_failure=keep_failures)
        before = self.recorder.written
        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):  # it prints a line per failed replay; we count them
            replay_trajectory.replay_cpu_sim(args, self.recorder.env, self.source_env, None,
                                             [copy.deepcopy(episode)], trajectories)
        if self.recorder.written == before:
            # replay_cpu_sim leaves a failed replay in RecordEpisode's buffer; drop it before the next one.
            self.recorder.discard()
            return None
        self.recorder.kept += 1
        written = self.recorder.last_episode
        return EpisodeOutcome(int(written["episode_seed"]), bool(written.get("success", False)),
                              int(written["elapsed_steps"]), time.perf_counter() - started)

    def close(self) -> None:
        self.recorder.close()
        if self.source_env is not None:
            self.source_env.close()


def replay_trajectory_file(source_h5: Path, directory: Path, name: str, obs_mode: str, control_mode: str,
                           keep_failures: bool = False, image_size: int = 64,
                           on_episode: Callable[[EpisodeOutcome | None], None] | None = None) -> int:
    """Replay every episode of ``source_h5`` (+ its ``.json``) into ``directory/name``; returns episodes written."""
    import json

    import h5py

    source_h5 = Path(source_h5)
    meta = json.loads(source_h5.with_suffix(".json").read_text())
    replayer = EpisodeReplayer(meta, directory, name, obs_mode, control_mode, image_size)
    written = 0
    try:
        with h5py.File(source_h5, "r") as trajectories:
            for episode in meta["episodes"]:
                outcome = replayer.replay(trajectories, episode, keep_failures)
                written += outcome is not None
                if on_episode is not None:
                    on_episode(outcome)
    finally:
        replayer.close()
    return written
