"""embodied-rl: reinforcement learning with simulators in the loop, on a Ray runtime."""

__version__ = "0.1.0"
