"""A problem set as a vector env: each episode is one problem, one step long (the response is the action).

``reset`` and every ``step`` return observations ``{"prompt": unicode [N], "problem_id": int64 [N]}``; ``step``
takes the N responses (strings) and scores each with the verifier. The reward is composite,
``outcome_weight * correct + format_weight * formatted``, and ``info`` keeps each part (``reward/outcome``,
``reward/format`` ``[N]``) for the metrics. Problems are drawn in a shuffled order that repeats per pass
(``seed``); with ``group_size`` G the N envs form N / G groups, each group's envs getting the same problem (GRPO).
"""

from __future__ import annotations

import numpy as np

from sim_envs.math.arithmetic import Problem
from sim_envs.math.verifier import score
from sim_envs.vector_env import EpisodeStats, StepBatch


class TextTaskEnv:
    single_action_shape = ()
    max_episode_steps = 1
    multi_turn = False
    """True for a conversation env (``reset``, then ``step`` turn by turn until every conversation is over), as
    ``multi_turn.ToolTaskEnv``; trainers pick their rollout by it."""

    def __init__(self, problems: list[Problem], num_envs: int, seed: int = 0, group_size: int = 1,
                 outcome_weight: float = 1.0, format_weight: float = 0.0, use_math_verify: bool = True):
        if num_envs % group_size:
            raise ValueError(f"num_envs={num_envs} is not a multiple of group_size={group_size}")
        self.problems = problems
        self.num_envs, self.group_size = num_envs, group_size
        self.outcome_weight, self.format_weight = outcome_weight, format_weight
        self.use_math_verify = use_math_verify
        self.rng = np.random.default_rng(seed)
        self.order: list[int] = []
        self.current = np.zeros(num_envs, np.int64)

    def _next_problem(self) -> int:
        if not self.order:
            self.order = self.rng.permutation(len(self.problems)).tolist()
        return self.order.pop()

    def _draw(self) -> dict:
        groups = [self._next_problem() for _ in range(self.num_envs // self.group_size)]
        self.current = np.repeat(np.asarray(groups, np.int64), self.group_size)
        return self.observation()

    def observation(self) -> dict:
        prompts = np.array([self.problems[i].question for i in self.current], dtype=np.str_)
        return {"prompt": prompts, "problem_id": self.current.copy()}

    def score_responses(self, responses, problem_ids) -> tuple[np.ndarray, np.ndarray]:
        """``(correct, formatted)``, bool ``[n]``, of ``responses`` to the problems ``problem_ids``."""
        scores = [score(str(r), self.problems[i].answer, self.use_math_verify) for r, i in zip(responses, problem_ids)]
        return np.array([s.correct for s in scores], bool), np.array([s.formatted for s in scores], bool)

    def reset(self, seed: int | None = None, state_ids: list[int] | None = None) -> dict:
        if seed is not None:
            self.rng, self.order = np.random.default_rng(seed), []
        if state_ids is not None:  # problem indices, one per env
            self.current = np.asarray(state_ids, np.int64) % len(self.problems)
            return self.observation()
        return self._draw()

    def step(self, actions, observe: bool = True) -> StepBatch:
        """``actions``: N response strings."""
        if len(actions) != self.num_envs:
            raise ValueError(f"{len(actions)} responses for {self.num_envs} envs")
        correct, formatted = self.score_responses(actions, self.current)
        rewards = (self.outcome_weight * correct + self.format_weight * formatted).astype(np.float32)
        done = np.ones(self.num_envs, bool)
        final = self.observation()
        stats = EpisodeStats(done, rewards.copy(), np.ones(self.num_envs, np.int64), correct, correct)
        info = {"reward/outcome": correct.astype(np.float32), "reward/format": formatted.astype(np.float32)}
        return StepBatch(self._draw(), rewards, done, np.zeros(self.num_envs, bool), final, correct, stats, info)

    def get_state(self) -> dict:
        """What decides the next prompts, as JSON-able values: the problem sampler's RNG state, the rest of the
        current pass over the problems (``order``) and the current problem of each env."""
        return {"rng": self.rng.bit_generator.state, "order": list(self.order),
                "current": [int(i) for i in self.current]}

    def set_state(self, state: dict) -> dict:
        """Undo to ``get_state()``'s moment: the same prompts now and the same ones drawn after; the observation."""
        if len(state["current"]) != self.num_envs:
            raise ValueError(f"a state of {len(state['current'])} envs for an env of {self.num_envs}")
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = state["rng"]
        self.order = [int(i) for i in state["order"]]
        self.current = np.asarray(state["current"], np.int64)
        return self.observation()

    def close(self) -> None:
        pass
