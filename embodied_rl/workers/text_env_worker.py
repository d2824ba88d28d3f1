"""Text env worker: owns a text task's train env (groups of G envs per prompt) and its held-out problems; hands out
prompts and scores responses with the task's verifier."""

from __future__ import annotations

import sim_envs
from embodied_rl.runtime import Worker


class TextEnvWorker(Worker):
    def __init__(self, task, options: dict, num_envs: int, group_size: int, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        options = dict(options)
        self.train = sim_envs.make(task, num_envs, split="train", seed=seed, group_size=group_size, **options)
        self.heldout = sim_envs.make(task, 1, split="heldout", **options)
        self.obs = self.train.reset()

    def prompts(self) -> list[str]:
        """The current N prompts (group-contiguous)."""
        return [str(p) for p in self.obs["prompt"]]

    def score(self, responses: list[str]) -> dict:
        """Score the N responses to ``prompts()`` and draw the next prompts: ``rewards``, ``outcome`` and
        ``format`` ``[N]``."""
        batch = self.train.step(responses)
        self.obs = batch.obs
        return {"rewards": batch.rewards, "outcome": batch.info["reward/outcome"],
                "format": batch.info["reward/format"]}

    def state(self) -> dict:
        """The train env's sampler state (``TextTaskEnv.get_state``), for a checkpoint."""
        return self.train.get_state()

    def restore(self, state: dict) -> None:
        """Continue from ``state()``'s moment: the same current and future prompts."""
        self.obs = self.train.set_state(state)

    def sft_examples(self) -> list[tuple[str, str]]:
        """Every train problem as (question, answer): the SFT warm-start's data."""
        return [(p.question, p.answer) for p in self.train.problems]

    def heldout_questions(self, count: int) -> list[str]:
        return [p.question for p in self.heldout.problems[:count]]

    def score_heldout(self, responses: list[str], problem_ids: list[int]) -> dict:
        """Per response to held-out problem ``problem_ids[i]``: ``correct``, ``formatted`` and ``extracted`` (the
        answer read from it, None if none)."""
        from sim_envs.math.verifier import score

        scores = [score(str(r), self.heldout.problems[i].answer, self.heldout.use_math_verify)
                  for r, i in zip(responses, problem_ids)]
        return {"correct": [s.correct for s in scores], "formatted": [s.formatted for s in scores],
                "extracted": [s.extracted for s in scores]}
