"""Embodied GRPO: groups of G envs start from the same initial state; each episode is scored (success or return),
the score's group-normalised advantage is given to every step of the episode; no critic.

Episodes run in lock-step (every env of a batch ends its episodes at the same steps: the env workers run them to
the time limit and reset each group to a shared initial state), so a batch ``[T, B]`` holds ``T / L`` episodes of
length L per env, and env ``b`` belongs to group ``b // G`` (group-contiguous across env workers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from embodied_rl.algorithms.advantages import grpo_advantages
from embodied_rl.algorithms.embodied.base import (ALGORITHMS, Algorithm, Problem, UpdateConfig, concat_rows,
                                                 importance_metrics, select_rows)
from embodied_rl.algorithms.filters import dynamic_sampling_mask
from embodied_rl.algorithms.losses import KL_KINDS, kl_penalty

SCORES = ("success", "return", "return_to_go")
STEP_WEIGHTINGS = ("step", "episode")


@dataclass
class GRPOConfig(UpdateConfig):
    name: str = "grpo"
    """The algorithm: a name registered in ``ALGORITHMS`` (ppo, grpo, sac, rlpd, sft)."""
    group_size: int = 8
    """G: envs per group that start from the same initial state (the total env count must be a multiple)."""
    score: str = "success"
    """Episode score: 'success' (1 if the task succeeded at any step, else 0), 'return' (summed reward), or
    'return_to_go' (each step scored by the rewards from it to the episode's end and compared with the group's
    members at the same step: a step is not credited with the luck of the steps before it; groups are filtered by
    their returns)."""
    clip_low: float = 0.2
    """Ratio clipped below at 1 - clip_low."""
    clip_high: float = 0.28
    """Ratio clipped above at 1 + clip_high (clip-higher: > clip_low keeps exploring)."""
    normalize_std: bool = True
    """Divide advantages by the group's score standard deviation (False: Dr.GRPO's mean-centred scores)."""
    filter_groups: bool = True
    """Drop groups whose members all scored the same (no signal) and sample more groups to fill the batch."""
    max_sampling_rounds: int = 4
    """At most this many sampling rounds per update while filling the batch with informative groups."""
    mask_after_success: bool = True
    """Train only on the steps up to an episode's first success (ManiSkill would have ended it there)."""
    step_weighting: str = "step"
    """How trained steps are averaged into the loss: 'step' (every step weighs the same, as token-mean in LLM
    GRPO: a failure trained over the whole episode outweighs a success cut at its early first success) or
    'episode' (every episode weighs the same, its steps sharing its weight: the mean over an episode's steps, then
    over episodes, as seq-mean-token-mean)."""
    kl_coef: float = 0.0
    """Weight of the KL penalty to a frozen copy of the initial policy (0: none)."""
    kl_kind: str = "k3"
    """KL estimator: k1, k2, k3."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""

    def problems(self) -> Iterator[Problem]:
        yield from super().problems()
        if self.group_size < 2:
            yield "group_size", self.group_size, "an integer >= 2"
        if self.score not in SCORES:
            yield "score", self.score, ", ".join(SCORES)
        if self.step_weighting not in STEP_WEIGHTINGS:
            yield "step_weighting", self.step_weighting, ", ".join(STEP_WEIGHTINGS)
        if not 0 < self.clip_low < 1:
            yield "clip_low", self.clip_low, "0 < clip_low < 1"
        if not self.clip_high > 0:
            yield "clip_high", self.clip_high, "> 0"
        if self.max_sampling_rounds < 1:
            yield "max_sampling_rounds", self.max_sampling_rounds, "an integer >= 1"
        if self.kl_coef < 0:
            yield "kl_coef", self.kl_coef, ">= 0"
        if self.kl_kind not in KL_KINDS:
            yield "kl_kind", self.kl_kind, ", ".join(KL_KINDS)
        if self.ent_coef < 0:
            yield "ent_coef", self.ent_coef, ">= 0"


def episode_length(done: torch.Tensor) -> int:
    """Length L of the lock-step episodes in ``done`` ``[T, B]`` (every env ends at steps L-1, 2L-1, ..., T-1)."""
    T = done.shape[0]
    ends = torch.nonzero(done[:, 0]).flatten()
    length = int(ends[0]) + 1 if len(ends) else 0
    expected = torch.zeros_like(done[:, 0])
    if length:
        expected[length - 1::length] = True
    if not length or T % length or not (done == expected[:, None]).all():
        raise ValueError("GRPO needs lock-step episodes: every env ending its episodes at the same steps, the last "
                         f"at the batch's last step (got a [{T}, {done.shape[1]}] batch ending at steps "
                         f"{ends.tolist()[:8]} for env 0)")
    return length


def to_episodes(x, length: int):
    """``[T, B, ...]`` (tensor or dict of tensors) -> ``[T / L * B, L, ...]``: episode-major, envs in order within
    each episode slot, so consecutive G rows form a group."""
    if isinstance(x, dict):
        return {k: to_episodes(v, length) for k, v in x.items()}
    T, B = x.shape[:2]
    x = x.reshape(T // length, length, B, *x.shape[2:]).swapaxes(1, 2)  # swapaxes: torch and numpy alike
    return x.reshape(T // length * B, length, *x.shape[3:])


def success_scores(success: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """success ``[E, L]`` bool -> (scores ``[E]`` float, 1 if any step succeeded; valid ``[E, L]`` bool, the steps
    up to and including the first success, or all steps where none succeeded)."""
    scores = success.any(dim=1).float()
    after_first = torch.cumsum(success.long(), dim=1) - success.long() > 0
    return scores, ~after_first


def episode_step_weights(valid: torch.Tensor) -> torch.Tensor:
    """valid ``[E, L]`` bool -> weights ``[E, L]``: ``N / (E * n_e)`` on episode e's ``n_e`` valid steps (N of them
    in all), 0 elsewhere, so that the mean over the N valid steps of ``w * x`` is the mean over episodes of each
    episode's mean ``x`` (episodes without a valid step get none)."""
    counts = valid.sum(dim=1, keepdim=True).to(torch.float32)
    episodes = (counts > 0).sum().clamp(min=1)
    return torch.where(valid, valid.sum() / (episodes * counts.clamp(min=1)), torch.zeros((), dtype=torch.float32))


def step_advantages(step_scores: torch.Tensor, group_size: int, normalize_std: bool = True) -> torch.Tensor:
    """Per-step group-relative advantages: ``step_scores`` ``[E, L]`` (episodes group-contiguous) -> ``[E, L]``,
    where column ``l`` is ``grpo_advantages`` of the group members' scores at step ``l``."""
    E, L = step_scores.shape
    by_step = grpo_advantages(step_scores.T.reshape(-1), group_size, normalize_std=normalize_std)  # [L * E]
    return by_step.reshape(L, E).T


@ALGORITHMS.register("grpo")
class GRPO(Algorithm):
    config_class = GRPOConfig
    uses_critic = False
    grouped_episodes = True

    @property
    def uses_reference(self) -> bool:
        return self.config.kl_coef > 0

    def select(self, batch: dict) -> tuple[dict, dict]:
        """Cut a ``[T, B]`` batch into episodes ``[E, L]``, score them, and keep the informative groups."""
        c = self.config
        length = episode_length(batch["terminated"] | batch["truncated"])
        success = to_episodes(batch["success"], length)
        if c.score == "success":
            scores, valid = success_scores(success)
            if not c.mask_after_success:
                valid = torch.ones_like(valid)
        else:
            rewards = to_episodes(batch["rewards"], length)
            scores = rewards.sum(dim=1)
            valid = torch.ones_like(success)
        groups = len(scores) // c.group_size
        if len(scores) % c.group_size:
            raise ValueError(f"{len(scores)} episodes do not form groups of group_size={c.group_size}")
        keep = dynamic_sampling_mask(scores, c.group_size) if c.filter_groups else torch.ones_like(valid[:, 0])
        episodes = dict(obs=to_episodes(batch["obs"], length), actions=to_episodes(batch["actions"], length),
                        logp=to_episodes(batch["logp"], length), valid=valid, scores=scores)
        if c.score == "return_to_go":
            episodes["step_scores"] = rewards.flip(1).cumsum(1).flip(1)  # [E, L]
        kept = {k: select_rows(v, keep) for k, v in episodes.items()}
        kept["groups_sampled"] = groups
        metrics = {"train/groups_sampled": groups, "train/groups_kept": int(keep.sum()) // c.group_size,
                   "train/score_mean": scores.mean().item(),
                   "train/success_once": success.any(dim=1).float().mean().item()}
        return kept, metrics

    def enough(self, selected: list[dict], rounds: int) -> bool:
        kept_groups = sum(len(s["scores"]) for s in selected) // self.config.group_size
        return kept_groups >= selected[0]["groups_sampled"] or rounds >= self.config.max_sampling_rounds

    def prepare(self, selected: list[dict]) -> tuple[dict, dict]:
        """Kept episodes (at most one sampling round's worth of groups) -> flat valid steps with the episode's
        advantage."""
        c = self.config
        limit = selected[0]["groups_sampled"] * c.group_size
        cat = lambda key: select_rows(concat_rows([s[key] for s in selected]), slice(0, limit))  # noqa: E731
        scores, valid = cat("scores"), cat("valid")
        if c.score == "return_to_go":
            advantages = step_advantages(cat("step_scores"), c.group_size, c.normalize_std)
        else:
            advantages = grpo_advantages(scores, c.group_size, normalize_std=c.normalize_std)[:, None].expand_as(valid)
        weighted = advantages
        if c.step_weighting == "episode":  # w >= 0 scales the clipped loss of its step: w max(-r A, -clip(r) A)
            weighted = advantages * episode_step_weights(valid)
        samples = dict(obs=select_rows(cat("obs"), valid), actions=cat("actions")[valid], old_logp=cat("logp")[valid],
                       advantages=weighted[valid])
        metrics = {"train/advantage_abs_mean": advantages.abs().mean().item(),
                   "train/groups_trained": len(scores) // c.group_size, "train/steps_trained": int(valid.sum())}
        return samples, metrics

    def loss(self, outputs: dict, minibatch: dict) -> tuple[torch.Tensor, dict]:
        c = self.config
        logp = outputs["logp"]
        pg_loss, pg_metrics = self.surrogate(outputs, minibatch, minibatch["advantages"], c.clip_low, c.clip_high)
        entropy = outputs["entropy"].mean()
        loss = pg_loss - c.ent_coef * entropy
        metrics = {"policy_loss": pg_loss.item(), "entropy": entropy.item(), "approx_kl": pg_metrics["approx_kl"],
                   "clip_fraction": pg_metrics["clip_fraction"], **importance_metrics(pg_metrics)}
        if c.kl_coef > 0:
            kl = kl_penalty(logp, minibatch["ref_logp"], c.kl_kind).mean()
            loss = loss + c.kl_coef * kl
            metrics["kl_to_reference"] = kl.item()
        return loss, metrics
