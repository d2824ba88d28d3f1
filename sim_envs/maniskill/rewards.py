"""Reward modes computed here from ManiSkill's info, beside ManiSkill's own (normalized_dense, dense, sparse).

``rlinf``: the reward of RLinf's ManiSkill VLA recipes, per step the difference of a staged score,

    r_t = R(s_t) - R(s_{t-1}),   R(s_t) = 0.1 * g_t + 0.1 * (g_t and g_{t-1}) + 1.0 * success_t,

where ``g_t`` is whether the robot grasps the object after step t (ManiSkill's ``info["is_grasped"]``; StackCube's
``info["is_cubeA_grasped"]``), and ``R(s_{-1}) = 0``, ``g_{-1} = False`` at every reset. Tasks whose info has no
grasp (PushCube) score ``R = success``. An episode's rewards sum to R at its last step, so a success that is lost
again (a cube dropped) takes its reward back. ManiSkill computes its sparse reward underneath, which this replaces.

Envs take it through ``build_env`` (a gym env, as ``single.build_gym_env`` builds it) or ``single_env`` (a
``SingleCpuEnv``).
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import torch

from sim_envs.errors import TaskConfigError
from sim_envs.maniskill.options import ManiSkillOptions

SIMULATOR_REWARD_MODES = ("normalized_dense", "dense", "sparse")
"""Reward modes ManiSkill computes itself."""
OWN_REWARD_MODES = ("rlinf",)
"""Reward modes computed here, over ManiSkill's sparse reward."""
REWARD_MODES = SIMULATOR_REWARD_MODES + OWN_REWARD_MODES
GRASP_KEYS = ("is_grasped", "is_cubeA_grasped")
"""Info keys that say whether the robot grasps the task's object (the first one present is read)."""
GRASP_WEIGHT, HELD_WEIGHT, SUCCESS_WEIGHT = 0.1, 0.1, 1.0


def check_reward_mode(reward_mode: str) -> None:
    """One line naming the allowed values when ``reward_mode`` is none of ``REWARD_MODES``."""
    if reward_mode not in REWARD_MODES:
        raise TaskConfigError(f"reward_mode={reward_mode!r} is not supported; allowed: {', '.join(REWARD_MODES)}")


def simulator_options(options: ManiSkillOptions) -> ManiSkillOptions:
    """``options`` for ManiSkill's ``gym.make``: a reward mode of our own becomes ManiSkill's 'sparse'."""
    check_reward_mode(options.reward_mode)
    if options.reward_mode in SIMULATOR_REWARD_MODES:
        return options
    return dataclasses.replace(options, reward_mode="sparse")


def staged_score(grasped: torch.Tensor, grasped_before: torch.Tensor, success: torch.Tensor) -> torch.Tensor:
    """RLinf's ``R(s_t)`` ``[N]`` float32 from this step's grasp ``[N]``, the previous step's ``[N]`` and this
    step's success ``[N]`` (bool tensors)."""
    grasped, grasped_before, success = grasped.bool(), grasped_before.bool(), success.bool()
    return (GRASP_WEIGHT * grasped.float() + HELD_WEIGHT * (grasped & grasped_before).float()
            + SUCCESS_WEIGHT * success.float())


class StagedDifferenceReward(gym.Wrapper):
    """Replaces a batched ManiSkill env's reward ``[N]`` with ``R(s_t) - R(s_{t-1})`` of ``staged_score``; a reset
    (of all envs, or of the rows ``options["env_idx"]`` as ManiSkill's vector env autoresets them) starts those
    rows from ``R = 0``, ungrasped."""

    def __init__(self, env):
        super().__init__(env)
        self.score_before: torch.Tensor | None = None  # R(s_{t-1}) [N] float32
        self.grasped_before: torch.Tensor | None = None  # g_{t-1} [N] bool

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        rows = None if not options or "env_idx" not in options else options["env_idx"]
        if rows is None or self.score_before is None:
            self.score_before = self.grasped_before = None  # all rows start over (sized at the next step)
        else:
            self.score_before[rows] = 0.0
            self.grasped_before[rows] = False
        return obs, info

    def step(self, action):
        obs, _, terminated, truncated, info = self.env.step(action)
        success = torch.as_tensor(info["success"]).reshape(-1).bool()
        grasp_key = next((k for k in GRASP_KEYS if k in info), None)
        grasped = (torch.zeros_like(success) if grasp_key is None
                   else torch.as_tensor(info[grasp_key], device=success.device).reshape(-1).bool())
        if self.score_before is None:
            self.score_before = torch.zeros(success.shape, dtype=torch.float32, device=success.device)
            self.grasped_before = torch.zeros_like(success)
        score = staged_score(grasped, self.grasped_before, success)
        reward = score - self.score_before
        self.score_before, self.grasped_before = score, grasped
        return obs, reward, terminated, truncated, info


def with_reward(env, reward_mode: str):
    """``env`` (a ManiSkill gym env, possibly wrapped) giving ``reward_mode``'s rewards: as it is for ManiSkill's
    own modes, else wrapped (its ManiSkill reward mode must be 'sparse': ``simulator_options``)."""
    check_reward_mode(reward_mode)
    if reward_mode in SIMULATOR_REWARD_MODES:
        return env
    return StagedDifferenceReward(env)


def build_env(env_id: str, options: ManiSkillOptions, **kwargs):
    """``single.build_gym_env(env_id, options, **kwargs)`` with the rewards of ``options.reward_mode``."""
    from sim_envs.maniskill.single import build_gym_env

    return with_reward(build_gym_env(env_id, simulator_options(options), **kwargs), options.reward_mode)


def single_env(env_id: str, options: ManiSkillOptions):
    """A ``single.SingleCpuEnv`` with the rewards of ``options.reward_mode`` (its gym env wrapped)."""
    from sim_envs.maniskill.single import SingleCpuEnv

    env = SingleCpuEnv(env_id, simulator_options(options))
    env.env = with_reward(env.env, options.reward_mode)
    return env
