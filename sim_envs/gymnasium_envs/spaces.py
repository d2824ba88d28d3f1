"""Gymnasium spaces as the runtime's arrays: observations float32 ``[D]``, actions float32 ``[A]``.

* Observations: a ``Box`` is flattened (``[D] = prod(shape)``); a ``Discrete(n)`` becomes a one-hot ``[n]``.
* Actions: a ``Box`` with finite bounds is offered as ``[-1, 1]`` per dimension and scaled to ``[low, high]``
  (the policies' tanh-squashed and clipped Gaussians live there; CleanRL and SB3 scale the same way); an unbounded
  one passes through. A ``Discrete(n)`` is offered as a vector ``[n]`` whose argmax is the action taken (a
  categorical policy sends one-hot rows).

Other spaces (Dict, Tuple, MultiDiscrete, images in a Box of uint8 with 3 axes) are refused in one line.
"""

from __future__ import annotations

import numpy as np

from sim_envs.errors import TaskConfigError


class ObservationSpace:
    """Converts one observation of a Box or Discrete space to float32 ``[dim]``."""

    def __init__(self, space, env_id: str):
        from gymnasium import spaces

        self.discrete = isinstance(space, spaces.Discrete)
        if self.discrete:
            self.n, self.start, self.dim = int(space.n), int(space.start), int(space.n)
        elif isinstance(space, spaces.Box):
            if space.dtype == np.uint8 and len(space.shape) == 3:
                raise TaskConfigError(f"gym:{env_id} observes images (Box {space.shape} uint8); allowed: "
                                      "Box vectors or Discrete observations")
            self.dim = int(np.prod(space.shape))
        else:
            raise TaskConfigError(f"gym:{env_id} has a {type(space).__name__} observation space; allowed: Box or "
                                  "Discrete")

    def convert(self, obs) -> np.ndarray:
        if self.discrete:
            row = np.zeros(self.n, np.float32)
            row[int(obs) - self.start] = 1.0
            return row
        return np.asarray(obs, np.float32).reshape(self.dim)


class ActionSpace:
    """The runtime's action ``[dim]`` (see the module docstring) -> the env's action."""

    def __init__(self, space, env_id: str):
        from gymnasium import spaces

        self.discrete = isinstance(space, spaces.Discrete)
        if self.discrete:
            self.n, self.start, self.dim = int(space.n), int(space.start), int(space.n)
            self.low, self.high = np.zeros(self.n, np.float32), np.ones(self.n, np.float32)
        elif isinstance(space, spaces.Box):
            self.shape, self.dim = tuple(space.shape), int(np.prod(space.shape))
            self.env_low = np.asarray(space.low, np.float64).reshape(self.dim)
            self.env_high = np.asarray(space.high, np.float64).reshape(self.dim)
            self.scaled = bool(np.all(np.isfinite(self.env_low)) and np.all(np.isfinite(self.env_high)))
            self.low = -np.ones(self.dim, np.float32) if self.scaled else self.env_low.astype(np.float32)
            self.high = np.ones(self.dim, np.float32) if self.scaled else self.env_high.astype(np.float32)
            self.dtype = space.dtype
        else:
            raise TaskConfigError(f"gym:{env_id} has a {type(space).__name__} action space; allowed: Box or Discrete")

    def clip(self, action: np.ndarray) -> np.ndarray:
        """The runtime's action clipped to the offered bounds, float32 ``[dim]`` (what the episode records)."""
        return np.clip(np.asarray(action, np.float32).reshape(self.dim), self.low, self.high)

    def to_env(self, action: np.ndarray):
        """A clipped action ``[dim]`` -> what ``env.step`` takes (an int for Discrete)."""
        if self.discrete:
            return int(np.argmax(action)) + self.start
        if self.scaled:
            action = self.env_low + (action.astype(np.float64) + 1.0) * 0.5 * (self.env_high - self.env_low)
        return np.asarray(action, self.dtype).reshape(self.shape)
