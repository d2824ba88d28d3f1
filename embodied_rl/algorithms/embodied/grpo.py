"""The GRPO family on embodied tasks (grpo, dr_grpo, dapo, gspo, gfpo, rloo, reinforce_pp; their defaults are
``group_family.FAMILY``, shared with text): groups of G envs start from the same initial state; each episode is
scored (success or return), the score's group-relative advantage is given to every step of the episode; no
critic.

Episodes run in lock-step (every env of a batch ends its episodes at the same steps: the env workers run them to
the time limit and reset each group to a shared initial state), so a batch ``[T, B]`` holds ``T / L`` episodes of
length L per env, and env ``b`` belongs to group ``b // G`` (group-contiguous across env workers). The family's
words on an episode: a sequence is an episode, a token one of its trained steps (or, with ``ratio_level=token``,
one factor of a step's decision).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import torch

from embodied_rl.algorithms.advantages import grpo_advantages
from embodied_rl.algorithms.embodied.base import (ALGORITHMS, Algorithm, Needs, Problem, UpdateConfig, concat_rows,
                                                 importance_metrics, select_rows)
from embodied_rl.algorithms.group_family import FAMILY, group_advantages
from embodied_rl.algorithms.losses import AGG_MODES, KL_KINDS, RATIO_LEVELS, kl_penalty, policy_loss
from embodied_rl.algorithms.registry import ADVANTAGE_ESTIMATORS

SCORES = ("success", "return", "return_to_go")
EPISODE = "episode"
"""The index of a prepared step's episode ``[N]`` long (``ratio_level=sequence`` takes one ratio per episode)."""


@dataclass
class GroupConfig(UpdateConfig):
    name: str = "grpo"
    """A member of the GRPO family (``group_family.FAMILY``): grpo, dr_grpo, dapo, gspo, gfpo, rloo, reinforce_pp."""
    group_size: int = 8
    """G: envs per group that start from the same initial state (the total env count must be a multiple)."""
    score: str = "success"
    """Episode score: 'success' (1 if the task succeeded at any step, else 0), 'return' (summed reward), or
    'return_to_go' (each step scored by the rewards from it to the episode's end and compared with the group's
    members at the same step: a step is not credited with the luck of the steps before it; groups are filtered by
    their returns)."""
    clip_low: Optional[float] = None
    """Ratio clipped below at 1 - clip_low (None: the algorithm's)."""
    clip_high: Optional[float] = None
    """Ratio clipped above at 1 + clip_high (clip-higher: > clip_low keeps exploring; None: the algorithm's)."""
    ratio_level: Optional[str] = None
    """'decision' (one ratio per step), 'token' (one per factor of a step's decision: needs a policy with
    ``evaluate_tokens``) or 'sequence' (one per episode, GSPO); None: the algorithm's (sequence for gspo, else
    decision)."""
    loss_agg: Optional[str] = None
    """How trained steps are averaged into the loss (``losses.AGG_MODES``): 'token-mean' (every step weighs the
    same: a failure trained over the whole episode outweighs a success cut at its early first success),
    'seq-mean-token-mean' (every episode weighs the same, its steps sharing its weight), 'seq-mean-token-sum'
    (each episode's summed loss, averaged over episodes), 'seq-mean-token-sum-norm' (the summed loss over the
    episode length, Dr.GRPO); None: the algorithm's."""
    dynamic_sampling: Optional[bool] = None
    """Drop groups whose members all scored the same (no signal) and sample more groups to fill the batch (None:
    the algorithm's: on for dapo)."""
    max_sampling_rounds: int = 4
    """At most this many sampling rounds per update while filling the batch with informative groups."""
    groups_per_update: Optional[int] = None
    """Build each update from at least this many kept groups (the informative ones with ``dynamic_sampling``,
    every group without it), accumulated over sampling rounds: rounds are sampled until that many are kept, and
    the update trains on all of them (the last round may add more than the count). The rounds are bounded by
    ``max_sampling_rounds``: when that many have been sampled, the update trains on the groups kept so far, fewer
    than asked (``train/groups_trained`` says how many; with none kept it takes no gradient step). Scores are made
    advantages within each round (groups are alike; ``reinforce_pp``'s batch statistics are one round's). None:
    one round's worth of groups (the kept groups up to one round's count, refilled from later rounds)."""
    gfpo_keep: Optional[int] = None
    """GFPO: keep the ``gfpo_keep`` episodes of each group with the fewest trained steps (the quickest successes;
    default half the group)."""
    mask_after_success: bool = True
    """Train only on the steps up to an episode's first success (ManiSkill would have ended it there)."""
    kl_coef: float = 0.0
    """Weight of the KL penalty to a frozen copy of the initial policy (0: none)."""
    kl_kind: str = "k3"
    """KL estimator: k1, k2, k3."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""

    ratio_levels = RATIO_LEVELS

    def setting(self, key: str):
        """The config's value of ``key``, or the family member's default where it is None (``ratio_level``:
        decision, or sequence for gspo)."""
        value = getattr(self, key)
        if value is not None:
            return value
        if key == "ratio_level":
            return "sequence" if FAMILY[self.name].sequence_ratio else "decision"
        return getattr(FAMILY[self.name], key)

    def problems(self) -> Iterator[Problem]:
        if self.name not in FAMILY:
            yield "name", self.name, ", ".join(FAMILY)
            return
        yield from super().problems()
        if self.group_size < 2:
            yield "group_size", self.group_size, "an integer >= 2"
        if self.score not in SCORES:
            yield "score", self.score, ", ".join(SCORES)
        if self.setting("loss_agg") not in AGG_MODES:
            yield "loss_agg", self.loss_agg, ", ".join(AGG_MODES)
        if not 0 < self.setting("clip_low") < 1:
            yield "clip_low", self.clip_low, "0 < clip_low < 1"
        if not self.setting("clip_high") > 0:
            yield "clip_high", self.clip_high, "> 0"
        if self.max_sampling_rounds < 1:
            yield "max_sampling_rounds", self.max_sampling_rounds, "an integer >= 1"
        if self.groups_per_update is not None and (isinstance(self.groups_per_update, bool) or not isinstance(
                self.groups_per_update, int) or self.groups_per_update < 1):
            yield "groups_per_update", self.groups_per_update, "null (one sampling round's worth) or an integer >= 1"
        if self.gfpo_keep is not None and not 1 <= self.gfpo_keep <= self.group_size:
            yield "gfpo_keep", self.gfpo_keep, f"1 to group_size ({self.group_size})"
        if self.score == "return_to_go" and (FAMILY[self.name].keep_shortest or FAMILY[self.name].advantages
                                             == "reinforce_pp"):
            yield "score", self.score, "success or return for gfpo and reinforce_pp (per-step scores need groups)"
        if self.setting("ratio_level") == "sequence" and self.off_policy_correction == "decoupled":
            yield "off_policy_correction", self.off_policy_correction, "behaviour with ratio_level=sequence"
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


def aggregation_weights(valid: torch.Tensor, loss_agg: str) -> torch.Tensor:
    """valid ``[E, L]`` bool -> weights ``[E, L]`` such that the mean over the N valid steps of ``w * x`` equals
    ``losses.aggregate_loss(x, valid, loss_agg)`` for any per-step ``x`` ``[E, L]``: 1 for token-mean;
    ``N / (E * n_e)`` on episode e's ``n_e`` valid steps for seq-mean-token-mean; ``N / E`` for seq-mean-token-sum;
    ``N / L`` for seq-mean-token-sum-norm (E: all episodes, an episode without a trained step counting as 0 as
    in ``aggregate_loss``; 0 on steps not trained)."""
    counts = valid.sum(dim=1, keepdim=True).to(torch.float32)
    total = valid.sum().to(torch.float32)
    episodes = max(valid.shape[0], 1)
    if loss_agg == "token-mean":
        weight = torch.ones_like(counts)
    elif loss_agg == "seq-mean-token-mean":
        weight = total / (episodes * counts.clamp(min=1))
    elif loss_agg == "seq-mean-token-sum":
        weight = (total / episodes).expand_as(counts)
    elif loss_agg == "seq-mean-token-sum-norm":
        weight = (total / valid.shape[1]).expand_as(counts)
    else:
        raise ValueError(f"unknown loss_agg {loss_agg!r}; allowed: {', '.join(AGG_MODES)}")
    return torch.where(valid, weight, torch.zeros((), dtype=torch.float32))


def step_advantages(step_scores: torch.Tensor, group_size: int, estimator=grpo_advantages) -> torch.Tensor:
    """Per-step group-relative advantages: ``step_scores`` ``[E, L]`` (episodes group-contiguous) -> ``[E, L]``,
    where column ``l`` is ``estimator`` (an ``ADVANTAGE_ESTIMATORS`` entry) of the group members' scores at step
    ``l``."""
    E, L = step_scores.shape
    by_step = estimator(step_scores.T.reshape(-1), group_size)  # [L * E]
    return by_step.reshape(L, E).T


def sequence_log_ratio(log_ratio: torch.Tensor, episode: torch.Tensor) -> torch.Tensor:
    """GSPO on episodes: per-step log-ratios ``[n]`` (or ``[n, M]`` per token) and each step's episode ``[n]`` ->
    ``[n, 1]``: the mean log-ratio over the episode's steps in this minibatch, given to each of them (an episode
    cut by a minibatch boundary is represented by its steps in each part)."""
    per_step = log_ratio.reshape(len(log_ratio), -1).mean(dim=1)
    ids, inverse = torch.unique(episode, return_inverse=True)
    sums = torch.zeros(len(ids), dtype=per_step.dtype, device=per_step.device).index_add(0, inverse, per_step)
    counts = torch.bincount(inverse, minlength=len(ids)).to(per_step.dtype)
    return (sums / counts)[inverse][:, None]


class GroupRelative(Algorithm):
    """Every member of the GRPO family, registered under each name; the config's ``name`` picks the defaults."""

    config_class = GroupConfig
    worlds = ("embodied", "text")

    @classmethod
    def needs(cls, config) -> Needs:
        return Needs(groups=True, reference=config.kl_coef > 0)

    @property
    def member(self):
        return FAMILY[self.config.name]

    def ratio_level(self) -> str:
        return self.config.setting("ratio_level")

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
        adv, keep, family_metrics = group_advantages(scores, valid.sum(dim=1), c.group_size, self.member,
                                                     c.setting("dynamic_sampling"), c.gfpo_keep)
        if c.score == "return_to_go":  # each step against the group's members at the same step
            step_scores = rewards.flip(1).cumsum(1).flip(1)  # [E, L]
            advantages = step_advantages(step_scores, c.group_size, ADVANTAGE_ESTIMATORS.get(self.member.advantages))
        else:
            advantages = adv[:, None].expand_as(valid)
        group_kept = keep.view(-1, c.group_size).any(dim=1, keepdim=True).expand(-1, c.group_size).reshape(-1)
        episodes = dict(obs=to_episodes(batch["obs"], length), actions=to_episodes(batch["actions"], length),
                        logp=to_episodes(batch["logp"], length), valid=valid & keep[:, None], scores=scores,
                        advantages=advantages)
        kept = {k: select_rows(v, group_kept) for k, v in episodes.items()}
        kept["groups_sampled"] = groups
        metrics = {"train/groups_sampled": groups, "train/groups_kept": int(group_kept.sum()) // c.group_size,
                   "train/score_mean": scores.mean().item(),
                   "train/success_once": success.any(dim=1).float().mean().item(), **family_metrics}
        return kept, metrics

    def wanted_groups(self, selected: list[dict]) -> int:
        """Kept groups an update asks for: ``groups_per_update``, else the groups of one sampling round."""
        return self.config.groups_per_update or selected[0]["groups_sampled"]

    def enough(self, selected: list[dict], rounds: int) -> bool:
        """Whether the kept groups of the ``rounds`` sampling rounds so far (``selected``, one ``select`` result
        each) fill an update: ``wanted_groups`` of them, or ``max_sampling_rounds`` rounds sampled."""
        kept_groups = sum(len(s["scores"]) for s in selected) // self.config.group_size
        return kept_groups >= self.wanted_groups(selected) or rounds >= self.config.max_sampling_rounds

    def prepare(self, selected: list[dict]) -> tuple[dict, dict]:
        """Kept episodes of the sampling rounds ``selected`` (in order; without ``groups_per_update`` at most one
        round's worth of groups, with it all of them) -> flat trained steps ``[N, ...]`` with the episode's
        advantage (times the aggregation weight of ``loss_agg``, taken over all the update's episodes) and the
        episode's index ``[N]``."""
        c = self.config
        limit = None if c.groups_per_update else selected[0]["groups_sampled"] * c.group_size
        cat = lambda key: select_rows(concat_rows([s[key] for s in selected]), slice(0, limit))  # noqa: E731
        scores, valid, advantages = cat("scores"), cat("valid"), cat("advantages")
        # w >= 0 scales the clipped loss of its step: w max(-r A, -clip(r) A)
        weighted = advantages * aggregation_weights(valid, c.setting("loss_agg"))
        episode = torch.arange(len(scores), device=valid.device)[:, None].expand_as(valid)
        samples = dict(obs=select_rows(cat("obs"), valid), actions=cat("actions")[valid], old_logp=cat("logp")[valid],
                       advantages=weighted[valid], **{EPISODE: episode[valid]})
        metrics = {"train/advantage_abs_mean": advantages[valid].abs().mean().item() if valid.any() else 0.0,
                   "train/groups_trained": len(scores) // c.group_size, "train/steps_trained": int(valid.sum())}
        return samples, metrics

    def minibatch_order(self, samples: dict, generator: torch.Generator) -> torch.Tensor:
        """Shuffled steps; with one ratio per episode, shuffled episodes, each episode's steps together."""
        if self.ratio_level() != "sequence":
            return super().minibatch_order(samples, generator)
        episode = samples[EPISODE].cpu()
        ids = torch.unique(episode)
        order = ids[torch.randperm(len(ids), generator=generator)]
        rank = torch.empty(int(ids.max()) + 1 if len(ids) else 0, dtype=torch.long)
        rank[order] = torch.arange(len(order))
        return torch.sort(rank[episode] * len(episode) + torch.arange(len(episode))).indices

    def loss(self, outputs: dict, minibatch: dict) -> tuple[torch.Tensor, dict]:
        c = self.config
        logp = outputs["logp"]
        clip_low, clip_high = c.setting("clip_low"), c.setting("clip_high")
        if self.ratio_level() == "sequence":
            log_ratio = sequence_log_ratio(logp - minibatch["old_logp"].to(logp.dtype), minibatch[EPISODE])
            zeros = torch.zeros_like(log_ratio)
            pg_loss, pg_metrics = policy_loss(log_ratio, zeros.detach(), minibatch["advantages"], torch.ones_like(
                log_ratio), clip_low, clip_high)
        else:
            pg_loss, pg_metrics = self.surrogate(outputs, minibatch, minibatch["advantages"], clip_low, clip_high)
        entropy = outputs["entropy"].mean()
        loss = pg_loss - c.ent_coef * entropy
        metrics = {"policy_loss": pg_loss.item(), "entropy": entropy.item(), "approx_kl": pg_metrics["approx_kl"],
                   "clip_fraction": pg_metrics["clip_fraction"], **importance_metrics(pg_metrics)}
        if c.kl_coef > 0:
            kl = kl_penalty(logp, minibatch["ref_logp"], c.kl_kind).mean()
            loss = loss + c.kl_coef * kl
            metrics["kl_to_reference"] = kl.item()
        return loss, metrics


for _name in FAMILY:
    ALGORITHMS.register(_name)(GroupRelative)
