"""One evaluation of the policy the rollout workers hold, on the run's fixed set of initial states."""

from __future__ import annotations

import numpy as np

from embodied_rl.config.schema import EvalConfig

SAMPLED_PREFIX = "eval_sampled"
"""Metrics of the same states run with sampled actions (``eval.sampled``)."""


def evaluation_states(e: EvalConfig) -> list[int]:
    """The evaluation set: initial-state seeds ``e.seed .. e.seed + e.num_episodes - 1``."""
    return list(range(e.seed, e.seed + e.num_episodes))


def episode_metrics(episodes: list[dict], prefix: str) -> dict:
    """Mean return, length, success_once and success_at_end over finished episodes, namespaced by ``prefix``."""
    if not episodes:
        return {}
    out = {f"{prefix}/episodes": len(episodes)}
    for key in ("episode_return", "episode_length", "success_once", "success_at_end"):
        out[f"{prefix}/{key}"] = float(np.mean([e[key] for e in episodes]))
    return out


def evaluate_policy(workers, e: EvalConfig) -> dict:
    """``eval/...`` metrics of one episode from every state of the evaluation set (deterministic actions unless
    ``e.greedy`` is False; on the out-of-distribution split ``e.split``, if any), plus ``eval_sampled/...`` on the
    same states when ``e.sampled`` asks for it, and ``eval_<split>/...`` for each of ``e.ood_splits``.
    ``eval/state_seed`` names the set; ``eval/max_episode_steps`` is the limit it ran at (None: the envs' own);
    ``eval/split`` the split (absent in distribution).

    ``workers``: an ``EmbodiedWorkers`` whose rollout workers hold the policy to evaluate."""
    states = evaluation_states(e)
    out = episode_metrics(workers.evaluate(states, e.greedy, e.max_episode_steps, e.split), "eval")
    out.update({"eval/greedy": e.greedy, "eval/state_seed": e.seed})
    if e.max_episode_steps is not None:
        out["eval/max_episode_steps"] = e.max_episode_steps
    if e.split is not None:
        out["eval/split"] = e.split
    if e.sampled and e.greedy:
        out.update(episode_metrics(workers.evaluate(states, False, e.max_episode_steps, e.split), SAMPLED_PREFIX))
    for split in e.ood_splits:
        out.update(episode_metrics(workers.evaluate(states, e.greedy, e.max_episode_steps, split), f"eval_{split}"))
    return out
