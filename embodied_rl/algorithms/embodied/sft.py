"""Supervised fine-tuning (behaviour cloning) on demonstrations, for any policy with ``supervised_loss``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Optional

import torch

from embodied_rl.algorithms.embodied.base import ALGORITHMS, Algorithm, Needs, OptimizerConfig, Problem

DEMO_SOURCES = ("motion_planning", "scripted", "path")


@dataclass
class DemonstrationSettings:
    """Where an algorithm's demonstrations come from (SFT clones them, RLPD mixes them into its batches)."""

    demos: Optional[str] = None
    """A demonstrations file or directory to read instead of generating any (overrides ``demo_source``): a ManiSkill
    trajectory ``.h5`` (with its ``.json``), a directory holding one, or a LeRobotDataset v3 directory (found by its
    ``meta/info.json``; its features must fit the task's observations and actions)."""
    demo_source: str = "motion_planning"
    """Where demonstrations come from: 'motion_planning' (ManiSkill's planner) or 'scripted' (MetaWorld's scripted
    policies), generated and cached (see ``embodied-rl demos``); or 'path' (the file in ``demo_path``)."""
    demo_path: Optional[str] = None
    """When demo_source='path': what ``demos`` takes (a ``.h5``, a directory with one, or a LeRobot dataset)."""
    demo_episodes: int = 100
    """Demonstrations to generate (motion_planning)."""
    demo_planner_speed: Optional[float] = None
    """Joint velocity and acceleration limits of the motion planner (rad/s, rad/s^2); None: ManiSkill's 0.9.
    Faster plans make shorter demonstrations: PickCube's take ~75 steps at 0.9 and ~52 at 2.0 (its limit is 50)."""

    def demo_problems(self) -> Iterator[Problem]:
        if self.demo_source not in DEMO_SOURCES:
            yield "demo_source", self.demo_source, ", ".join(DEMO_SOURCES)
        if self.demo_source == "path" and not self.demo_path and not self.demos:
            yield "demo_path", self.demo_path, "a .h5 trajectory file or LeRobot directory when demo_source='path'"
        if self.demo_episodes < 1:
            yield "demo_episodes", self.demo_episodes, "an integer >= 1"
        if self.demo_planner_speed is not None and not 0 < self.demo_planner_speed <= 10:
            yield "demo_planner_speed", self.demo_planner_speed, "null (ManiSkill's 0.9) or rad/s in (0, 10]"


@dataclass
class SFTConfig(OptimizerConfig, DemonstrationSettings):
    name: str = "sft"
    """The algorithm: a name registered in ``ALGORITHMS`` (ppo, grpo, sac, rlpd, sft)."""
    lr: float = 1e-3
    """Adam learning rate."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    batch_size: int = 256
    """Demonstration steps per gradient step."""
    gradient_steps: int = 4000
    """Gradient steps of the whole stage."""
    steps_per_iteration: int = 500
    """Gradient steps between two log lines (evaluations and checkpoints count these iterations)."""
    cosine_decay: bool = True
    """Anneal the learning rate to 0 over ``gradient_steps`` on a cosine (False: constant), so the stage ends on
    small steps rather than wherever the last large one left the policy."""

    def problems(self) -> Iterator[Problem]:
        yield from super().problems()
        yield from self.demo_problems()
        if self.batch_size < 1:
            yield "batch_size", self.batch_size, "an integer >= 1"
        if self.gradient_steps < 1:
            yield "gradient_steps", self.gradient_steps, "an integer >= 1"
        if self.steps_per_iteration < 1:
            yield "steps_per_iteration", self.steps_per_iteration, "an integer >= 1"


@ALGORITHMS.register("sft")
class SFT(Algorithm):
    """Minibatches of demonstration steps: obs ``[n, ...]`` and the demonstrated actions ``[n, A]`` (or chunks
    ``[n, K, A]``, as the policy predicts them)."""

    config_class = SFTConfig

    @classmethod
    def needs(cls, config) -> Needs:
        return Needs(demonstrations="only")

    def learning_rate(self, progress: float) -> float:
        """Cosine from ``lr`` at progress 0 to 0 at progress 1 (constant without ``cosine_decay``)."""
        if not self.config.cosine_decay:
            return self.config.lr
        return 0.5 * self.config.lr * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))

    def evaluate(self, policy, minibatch: dict) -> dict:
        return dict(loss=policy.supervised_loss(minibatch["obs"], minibatch["actions"]))

    def loss(self, outputs: dict, minibatch: dict) -> tuple[torch.Tensor, dict]:
        return outputs["loss"], {"sft_loss": outputs["loss"].item()}
