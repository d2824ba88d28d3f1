"""Out-of-distribution evaluation splits of ManiSkill tasks (``eval.split``), the three kinds RLinf reports on
ManiSkill: vision, semantic and execution. A split is applied on top of the same fixed initial states as the
in-distribution evaluation: the task's own seeded reset runs first, then the split changes what it names, drawn
from the episode's seed (``np.random.default_rng([seed, salt])``), so a state id gives the same variation in every
process and every run.

* ``vision``: only what the cameras see. Ambient light 0.05-0.8 (ManiSkill's 0.3), every task object recoloured
  at random, the sensor camera moved by up to 3 cm along each axis. Physics and state observations unchanged; an
  env without a renderer (state observations) has nothing to change.
* ``semantic``: unseen objects and instructions. The task's object scaled by 0.75 or 1.25 (PickCube, PushCube,
  PullCube: its ``cube_half_size``; the scene is rebuilt when the size changes) and a held-out paraphrase of the
  task's instruction (camera observations' ``obs["instruction"]``, the task's ``ood_instruction``).
* ``execution``: perturbed initial states and a mid-episode disturbance. After the reset the first task object is
  moved 2-4 cm on the table in a random direction and the arm's joints are offset by N(0, 0.05 rad); at a step
  drawn from 10-20 the object is pushed (its velocity set to 0.2-0.4 m/s horizontally, in a random direction).
"""

from __future__ import annotations

import math

import numpy as np

from sim_envs.errors import TaskConfigError

SPLITS = ("vision", "semantic", "execution")
SALT = {"vision": 101, "semantic": 202, "execution": 303}
TASK_OBJECTS = {"PickCube-v1": ("cube",), "PushCube-v1": ("obj",), "PullCube-v1": ("obj",),
                "StackCube-v1": ("cubeA", "cubeB"), "PegInsertionSide-v1": ("peg", "box")}
"""The attributes of the unwrapped env holding the task's objects (the first is the one execution moves)."""
SCALABLE_OBJECTS = ("PickCube-v1", "PushCube-v1", "PullCube-v1")
"""Tasks whose object size is the env's ``cube_half_size``, read when the scene is built and at every reset."""
SCALES = (0.75, 1.25)
AMBIENT_RANGE = (0.05, 0.8)
CAMERA_SHIFT_M = 0.03
OFFSET_RANGE_M = (0.02, 0.04)
ARM_JOINTS = 7
JOINT_NOISE_RAD = 0.05
PUSH_STEPS = (10, 20)
PUSH_SPEED = (0.2, 0.4)


def check_split(split: str | None, env_id: str) -> None:
    """One clear line if ``split`` is not a split this task has."""
    if split is None:
        return
    if split not in SPLITS:
        raise TaskConfigError(f"ood_split={split!r} is not a split; allowed: {', '.join(SPLITS)}")
    if env_id not in TASK_OBJECTS:
        raise TaskConfigError(f"ood_split={split!r}: {env_id} has no OOD splits; allowed tasks: "
                              f"{', '.join(TASK_OBJECTS)}")


class OodSplit:
    """One split applied to one ManiSkill CPU env (``SingleCpuEnv``): ``before_reset`` may ask for a rebuilt
    scene, ``after_reset`` changes the fresh episode (True when the observation must be taken again) and
    ``before_step`` disturbs it mid-episode. ``variation`` is what the current episode got (for tests and logs)."""

    def __init__(self, split: str, env_id: str, unwrapped):
        check_split(split, env_id)
        self.split, self.env = split, unwrapped
        self.objects = TASK_OBJECTS[env_id]
        self.scalable = env_id in SCALABLE_OBJECTS
        self.base_half_size = float(unwrapped.cube_half_size) if self.scalable else None
        self.variation: dict = {}
        self.rng = np.random.default_rng(0)
        self.unseeded = 0
        self.default_camera = None

    def before_reset(self, seed: int | None) -> bool:
        """Draw this episode's variation; True when the scene must be rebuilt (a new object size)."""
        if seed is None:  # training envs: a stream of its own
            seed, self.unseeded = 1_000_000_000 + self.unseeded, self.unseeded + 1
        self.rng = np.random.default_rng([int(seed), SALT[self.split]])
        self.variation = {}
        if self.split == "semantic" and self.scalable:
            scale = float(self.rng.choice(SCALES))
            half_size = self.base_half_size * scale
            self.variation.update(object_scale=scale, object_half_size=half_size)
            rebuild = not math.isclose(float(self.env.cube_half_size), half_size)
            self.env.cube_half_size = half_size
            return rebuild
        return False

    def after_reset(self) -> bool:
        """Apply the drawn variation to the episode that just started; True if the observation changed."""
        if self.split == "vision":
            self._vision()
            return self.variation.get("rendered", True)  # the images (the state part is the same)
        if self.split == "execution":
            self._perturb_initial_state()
            low, high = PUSH_STEPS
            angle = self.rng.uniform(0, 2 * math.pi)
            speed = self.rng.uniform(*PUSH_SPEED)
            self.variation.update(push_step=int(self.rng.integers(low, high + 1)),
                                  push_velocity=[speed * math.cos(angle), speed * math.sin(angle), 0.0])
            return True
        return False

    def before_step(self, step: int) -> None:
        """Before the episode's ``step``-th simulator step (0-based): the execution split's push."""
        if self.split == "execution" and step == self.variation.get("push_step"):
            import torch

            target = getattr(self.env, self.objects[0])
            target.set_linear_velocity(torch.tensor([self.variation["push_velocity"]], dtype=torch.float32))

    # --- the variations -----------------------------------------------------------------------------------------
    def _vision(self) -> None:
        import sapien

        if getattr(self.env.backend, "render_backend", None) == "none":  # nothing is rendered: nothing to vary
            self.variation.update(rendered=False)
            return
        ambient = float(self.rng.uniform(*AMBIENT_RANGE))
        self.env.scene.set_ambient_light([ambient] * 3)
        colours = {}
        for name in self.objects:
            colour = [*self.rng.uniform(0, 1, 3).tolist(), 1.0]
            for entity in getattr(self.env, name)._objs:
                body = entity.find_component_by_type(sapien.render.RenderBodyComponent)
                for shape in body.render_shapes if body is not None else []:
                    for part in shape.parts if hasattr(shape, "parts") and shape.parts else [shape]:
                        part.material.base_color = colour
            colours[name] = colour
        shift = self.rng.uniform(-CAMERA_SHIFT_M, CAMERA_SHIFT_M, 3)
        for sensor in getattr(self.env, "_sensors", {}).values():
            camera = getattr(sensor, "camera", None)
            if camera is None:
                continue
            if self.default_camera is None:
                pose = camera.get_local_pose()  # ManiSkill's batched Pose [1, 7]
                self.default_camera = (pose.p[0].numpy().astype(np.float64), pose.q[0].numpy().astype(np.float64))
            position, quaternion = self.default_camera
            camera.set_local_pose(sapien.Pose(p=(position + shift).tolist(), q=quaternion.tolist()))
        self.variation.update(ambient_light=ambient, colours=colours, camera_shift=shift.tolist())

    def _perturb_initial_state(self) -> None:
        import torch
        from mani_skill.utils.structs.pose import Pose

        target = getattr(self.env, self.objects[0])
        angle = self.rng.uniform(0, 2 * math.pi)
        distance = self.rng.uniform(*OFFSET_RANGE_M)
        offset = [distance * math.cos(angle), distance * math.sin(angle), 0.0]
        pose = target.pose
        target.set_pose(Pose.create_from_pq(pose.p + torch.tensor([offset], dtype=pose.p.dtype), pose.q))
        robot = self.env.agent.robot
        qpos = robot.get_qpos().clone()
        noise = self.rng.normal(0, JOINT_NOISE_RAD, ARM_JOINTS)
        qpos[0, :ARM_JOINTS] += torch.as_tensor(noise, dtype=qpos.dtype)
        self.env.agent.reset(qpos)
        self.variation.update(object_offset=offset, joint_offsets=noise.tolist())
