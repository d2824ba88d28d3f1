"""Scripted policies of robosuite tasks: hand-written waypoint controllers acting in ``osc_pose`` on robosuite's own
observation dict (``SingleRobosuiteEnv.raw_obs``: object and end-effector positions, privileged but observable).

Each is a small state machine: ``policy = SCRIPTS[env_id](); policy.reset(); action = policy(raw_obs)`` with
``action`` float32 ``[7]`` = ``[dx, dy, dz, dax, day, daz, grip]`` in [-1, 1] (5 cm a unit; grip +1 closes).
Measured on seeds 0-99 (``embodied-rl demos``): Lift 100/100 (~36 steps), Door 100/100 (~99 steps).
"""

from __future__ import annotations

import numpy as np

STEP_M = 0.05
"""``osc_pose``'s translation per action unit (robosuite's Panda default ``output_max``)."""
OPEN, CLOSE = -1.0, 1.0


def move_towards(eef: np.ndarray, target: np.ndarray, grip: float, gain: float = 1.0) -> np.ndarray:
    """The ``osc_pose`` action ``[7]`` that moves the gripper from ``eef`` to ``target`` (``[3]`` world positions,
    up to ``gain`` x 5 cm a step) without turning it, with gripper command ``grip``."""
    action = np.zeros(7, np.float32)
    action[:3] = np.clip(gain * (target - eef) / STEP_M, -1.0, 1.0)
    action[6] = grip
    return action


class LiftScript:
    """Lift: above the cube, down around it, close, lift 15 cm."""

    def reset(self) -> None:
        self.phase, self.phase_steps, self.start = "above", 0, None

    def _next(self, phase: str) -> None:
        self.phase, self.phase_steps = phase, 0

    def __call__(self, obs: dict) -> np.ndarray:
        eef, cube = np.asarray(obs["robot0_eef_pos"]), np.asarray(obs["cube_pos"])
        if self.start is None:
            self.start = cube.copy()
        self.phase_steps += 1
        if self.phase == "above":
            target = cube + [0.0, 0.0, 0.08]
            if np.linalg.norm(target - eef) < 0.01 or self.phase_steps > 40:
                self._next("down")
            return move_towards(eef, target, OPEN)
        if self.phase == "down":
            target = cube + [0.0, 0.0, -0.005]
            if np.linalg.norm(target - eef) < 0.008 or self.phase_steps > 30:
                self._next("close")
            return move_towards(eef, target, OPEN)
        if self.phase == "close":
            if self.phase_steps > 10:
                self._next("lift")
            return move_towards(eef, eef, CLOSE)
        return move_towards(eef, self.start + [0.0, 0.0, 0.15], CLOSE)


class DoorScript:
    """Door (with its latch): above the handle's lever, down onto it, close, push the lever down until it has turned
    1.2 rad (unlatched), then pull towards the robot (+y) while still pressing it down, until the door is open."""

    def reset(self) -> None:
        self.phase, self.phase_steps = "above", 0

    def _next(self, phase: str) -> None:
        self.phase, self.phase_steps = phase, 0

    def __call__(self, obs: dict) -> np.ndarray:
        eef, handle = np.asarray(obs["robot0_eef_pos"]), np.asarray(obs["handle_pos"])
        self.phase_steps += 1
        if self.phase == "above":
            target = handle + [0.0, 0.0, 0.06]
            if np.linalg.norm(target - eef) < 0.025 or self.phase_steps > 40:
                self._next("down")
            return move_towards(eef, target, OPEN)
        if self.phase == "down":  # the fingers stop ~2 cm off the lever's centre line: wait for the height only
            if abs(handle[2] - eef[2]) < 0.01 or self.phase_steps > 20:
                self._next("close")
            return move_towards(eef, handle, OPEN)
        if self.phase == "close":
            if self.phase_steps > 8:
                self._next("turn")
            return move_towards(eef, eef, CLOSE)
        if self.phase == "turn":
            if abs(float(np.ravel(obs["handle_qpos"])[0])) > 1.2 or self.phase_steps > 30:
                self._next("pull")
            return move_towards(eef, eef + [0.0, 0.0, -0.03], CLOSE)
        return move_towards(eef, eef + [0.0, 0.03, -0.01], CLOSE)


SCRIPTS = {"Lift": LiftScript, "Door": DoorScript}
"""robosuite env name -> its scripted policy class."""
