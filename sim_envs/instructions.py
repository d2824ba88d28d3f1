"""Language instructions beside camera observations.

A task may declare an instruction (``register_task(..., instruction="push the blue cube onto the target")``);
``sim_envs.make`` then wraps its vector env in ``InstructedEnv``, which adds ``obs["instruction"]`` to every dict
observation. It is done here, once, rather than in each simulator adapter (CPU, processes, GPU), so every backend
and every user task gets it alike.

Only dict observations (``obs_mode='rgb'``: ``{"rgb", "state"}``) carry the instruction: a state observation is a
plain ``[N, D]`` array, which the state policies (mlp, transformer) take as it is.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sim_envs.vector_env import Observation, StepBatch

INSTRUCTION_KEY = "instruction"


def with_instruction(obs: Observation, instruction: str) -> Observation:
    """``obs`` plus ``obs["instruction"]``: a numpy unicode array ``[N]`` (``instruction`` for every env). A new
    dict (the caller's is not changed); array observations are returned unchanged."""
    if not isinstance(obs, dict):
        return obs
    rows = len(next(iter(obs.values())))
    return {**obs, INSTRUCTION_KEY: np.full(rows, instruction)}


class InstructedEnv:
    """A vector env whose dict observations (``reset``, ``StepBatch.obs`` and ``StepBatch.final_obs``) carry
    ``obs["instruction"]``, a numpy unicode array ``[N]``. Every other attribute is the wrapped env's."""

    def __init__(self, env, instruction: str):
        self.wrapped = env
        self.instruction = str(instruction)

    def __getattr__(self, name: str):
        if name == "wrapped":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def reset(self, *args, **kwargs) -> Observation:
        return with_instruction(self.wrapped.reset(*args, **kwargs), self.instruction)

    def step(self, actions: np.ndarray, observe: bool = True, **hold) -> StepBatch:
        batch = self.wrapped.step(actions, observe=observe, **hold)  # hold: ``active`` where the env holds envs
        obs = with_instruction(batch.obs, self.instruction)
        final_obs = obs if batch.final_obs is batch.obs else with_instruction(batch.final_obs, self.instruction)
        return dataclasses.replace(batch, obs=obs, final_obs=final_obs)

    def restore(self, state) -> Observation:
        """The wrapped env's ``restore`` (a checkpoint's env state): its observations, with the instruction."""
        return with_instruction(self.wrapped.restore(state), self.instruction)

    def close(self) -> None:
        self.wrapped.close()
