"""ManiSkill's batched PhysX GPU simulation: N envs in one process on one CUDA device."""

from __future__ import annotations

import numpy as np

from sim_envs.maniskill.options import ManiSkillOptions
from sim_envs.maniskill.rendering import render_frames
from sim_envs.maniskill.rewards import build_env
from sim_envs.maniskill.single import find_max_episode_steps
from sim_envs.vector_env import EpisodeTracker, StepBatch, group_leaders


def _rows(state: dict, index):
    """Rows ``index`` of every tensor of a (nested) state dict."""
    return {k: _rows(v, index) if isinstance(v, dict) else v[index] for k, v in state.items()}


def _numpy(value):
    if isinstance(value, dict):
        return {k: _numpy(v) for k, v in value.items()}
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)


class GpuManiSkillEnvs:
    """``VectorEnv`` over ``ManiSkillVectorEnv`` with same-step autoreset; results are copied to host numpy."""

    def __init__(self, env_id: str, num_envs: int, options: ManiSkillOptions):
        from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv

        base = build_env(env_id, options, num_envs=num_envs, sim_backend="physx_cuda")
        self.max_episode_steps = find_max_episode_steps(base)
        self.vector_env = ManiSkillVectorEnv(base, num_envs, auto_reset=True,
                                             ignore_terminations=options.ignore_terminations)
        self.num_envs = num_envs
        self.options = options
        self.single_action_shape = tuple(self.vector_env.single_action_space.shape)
        self.tracker = EpisodeTracker(num_envs)

    def reset(self, seed: int | None = None, state_ids: list[int] | None = None):
        base = self.options.seed if seed is None else seed
        seeds = [int(s) for s in state_ids] if state_ids is not None else [base + i for i in range(self.num_envs)]
        obs, _ = self.vector_env.reset(seed=seeds)
        leaders = group_leaders(seeds)
        if (leaders != np.arange(self.num_envs)).any():
            # ManiSkill seeds torch once, with seeds[0], and tasks draw every env's pose from it: envs of one id
            # got different states. They take their leader's.
            obs = self._start_from_leaders(leaders)
        self.tracker.reset_all()
        return _numpy(obs)

    def _start_from_leaders(self, leaders: np.ndarray):
        """Reset every env whose leader (``group_leaders`` ``[N]``) is another env to that env's state (rows of
        ManiSkill's state dict, ``[M, D]`` per actor and articulation for the M such envs); returns the observation
        of all envs ``[N, ...]`` (torch), recomputed from their states."""
        import torch

        device = self.vector_env.unwrapped.device
        members = np.flatnonzero(leaders != np.arange(self.num_envs))  # ascending: ManiSkill writes rows in env order
        states = _rows(self.vector_env.unwrapped.get_state_dict(), torch.as_tensor(leaders[members], device=device))
        obs, _ = self.vector_env.reset(options=dict(env_idx=torch.as_tensor(members, device=device),
                                                     reset_to_env_states=dict(env_states=states)))
        return obs

    def reseed(self, seed: int, stride: int | None = None) -> None:
        """The seed of the next explicit ``reset`` (autoresets draw from ManiSkill's per-env generators)."""
        self.options.seed = seed

    def step(self, actions: np.ndarray, observe: bool = True) -> StepBatch:  # renders every step (batched)
        import torch

        device = self.vector_env.unwrapped.device
        obs, rewards, terminated, truncated, info = self.vector_env.step(torch.as_tensor(actions, device=device))
        obs, rewards = _numpy(obs), _numpy(rewards).astype(np.float32)
        terminated, truncated = _numpy(terminated).astype(bool), _numpy(truncated).astype(bool)
        done = terminated | truncated
        success = _numpy(info["success"]).astype(bool) if "success" in info else np.zeros(self.num_envs, bool)
        final_obs = obs
        if "final_observation" in info:
            final_obs = _numpy(info["final_observation"])
            if "success" in info.get("final_info", {}):
                success = np.where(done, _numpy(info["final_info"]["success"]).astype(bool), success)
        self.tracker.record(rewards, success)
        return StepBatch(obs, rewards, terminated, truncated, final_obs, success, self.tracker.end(done, success))

    def render(self) -> np.ndarray:
        """Each env's current scene: uint8 ``[N, H, W, 3]`` (built with ``render_size`` > 0)."""
        return render_frames(self.vector_env)

    def close(self) -> None:
        self.vector_env.close()
