"""Tool env worker: owns a multi-turn text task's train env (N conversations in groups of G per problem) and its
held-out env (one conversation per held-out problem); the driver steps either turn by turn through
``ToolEnvProxy``, which ``runners/multi_turn_rollout.rollout`` takes as its env."""

from __future__ import annotations

import ray

import sim_envs
from embodied_rl.runtime import Worker

SPLITS = ("train", "heldout")


class ToolEnvWorker(Worker):
    def __init__(self, task, options: dict, num_envs: int, group_size: int, heldout_envs: int, seed: int = 0,
                 **kwargs):
        super().__init__(**kwargs)
        options = dict(options)
        self.envs = {"train": sim_envs.make(task, num_envs, split="train", seed=seed, group_size=group_size,
                                            **options)}
        probe = sim_envs.make(task, 1, split="heldout", **options)
        self.heldout_count = min(heldout_envs, len(probe.problems))  # conversations of one held-out evaluation
        self.envs["heldout"] = sim_envs.make(task, self.heldout_count, split="heldout", **options)

    def _env(self, split: str):
        if split not in self.envs:
            raise ValueError(f"split={split!r}; allowed: {', '.join(SPLITS)}")
        return self.envs[split]

    def stop_strings(self) -> tuple[str, ...]:
        return tuple(self.envs["train"].stop_strings)

    def num_envs(self, split: str) -> int:
        return self._env(split).num_envs

    def reset(self, split: str, seed: int | None = None, state_ids: list[int] | None = None) -> dict:
        return self._env(split).reset(seed=seed, state_ids=state_ids)

    def step(self, split: str, actions: list[str | None]):
        """One turn of ``split``'s conversations (``ToolTaskEnv.step``): the ``StepBatch``."""
        return self._env(split).step(actions)

    def state(self) -> dict:
        """The train env's problem sampler (``TextTaskEnv.get_state``), for a checkpoint: between rounds every
        conversation is over, so the sampler is all a resumed run needs."""
        return self.envs["train"].get_state()

    def restore(self, state: dict) -> None:
        """Continue from ``state()``'s moment: the next round draws the problems it would have drawn."""
        self.envs["train"].set_state(state)

    def demonstrations(self) -> list[tuple[str, list[tuple[str, bool]]]]:
        """Every train problem as (question, [(text, written_by_model), ...]): the SFT warm start's data."""
        return self.envs["train"].demonstrations()


class ToolEnvProxy:
    """One split of a ``ToolEnvWorker`` as the env ``rollout`` steps: ``reset``, ``step`` and ``stop_strings``,
    each a blocking call to the worker."""

    def __init__(self, worker, split: str):
        self.worker, self.split = worker, split
        self.stop_strings = ray.get(worker.stop_strings.remote())
        self.num_envs = ray.get(worker.num_envs.remote(split))

    def reset(self, seed: int | None = None, state_ids: list[int] | None = None) -> dict:
        return ray.get(self.worker.reset.remote(self.split, seed, None if state_ids is None else list(state_ids)))

    def step(self, actions: list[str | None]):
        return ray.get(self.worker.step.remote(self.split, list(actions)))
