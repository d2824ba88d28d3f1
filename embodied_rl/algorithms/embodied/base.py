"""What every embodied algorithm shares: its registry, the optimizer-loop settings, and the interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np
import torch

from embodied_rl.algorithms.correction import truncated_is_weights
from embodied_rl.algorithms.losses import RATIO_LEVELS, policy_loss
from embodied_rl.utils.registry import Registry

ALGORITHMS = Registry("algorithm")

OFF_POLICY_CORRECTIONS = ("behaviour", "decoupled")
PROXIMAL_LOGP = "prox_logp"
"""Decoupled PPO: the proximal policy's log-probs of a sample ``[n]`` (with token ratios ``[n, M]``)."""
TOKEN_LOGP = "stored.token_logp"
"""What a policy with token-level log-probs stores of each decision at ``act``: the log-prob of each factor of the
decision ``[B, M]`` float32 (their sum is the decision's log-prob)."""

Problem = tuple  # (key, value, allowed): one failed range check, reported as ``algorithm.<key>=<value> ...``


@dataclass
class OptimizerConfig:
    """Settings every algorithm has."""

    name: str = "ppo"
    """The algorithm: a name registered in ``ALGORITHMS`` (ppo, grpo, sft, sac, rlpd)."""
    lr: float = 3e-4
    """Adam learning rate."""
    max_grad_norm: float = 0.5
    """Gradient clipping norm."""

    def setting(self, key: str):
        """The value of ``key`` in effect (an algorithm whose keys default to None resolves them here)."""
        return getattr(self, key)

    def problems(self) -> Iterator[Problem]:
        """Failed range checks as ``(key, value, allowed)``."""
        if not self.lr > 0:
            yield "lr", self.lr, "> 0"
        if not self.max_grad_norm > 0:
            yield "max_grad_norm", self.max_grad_norm, "> 0"


@dataclass
class UpdateConfig(OptimizerConfig):
    """The optimizer loop of the RL algorithms: epochs of minibatches over each sampled batch."""

    update_epochs: int = 4
    """Passes over each batch."""
    num_minibatches: int = 8
    """Minibatches per pass."""
    target_kl: Optional[float] = 0.1
    """Stop an update's epochs once the approximate KL to the sampling policy exceeds this (None: never)."""
    ratio_level: str = "decision"
    """Where the importance ratio is taken and clipped: 'decision' (one ratio per decision, the product over all its
    factors) or 'token' (one ratio per factor of the decision's distribution, each clipped on its own, the
    decision's advantage given to each: an action token of OpenVLA, one Gaussian coordinate of a Pi0 denoising
    step), RLinf's token-level log-probs. 'token' needs a policy with ``evaluate_tokens``."""
    off_policy_correction: str = "behaviour"
    """How data sampled by an older policy (``rollout.max_staleness=1``) is corrected: 'behaviour' (the ratio is
    taken against the sampling policy's log-probs and clipped, as plain PPO), or 'decoupled' (decoupled PPO, Hilton
    et al. 2021: the ratio is taken against the proximal policy, the weights as this update starts, and clipped
    there, so the trust region is around the current policy; each sample is weighted by the behaviour-to-proximal
    importance ratio, truncated at ``is_cap``)."""
    is_cap: float = 2.0
    """Upper bound of the truncated importance weights of 'decoupled'."""

    ratio_levels = RATIO_LEVELS[:2]  # a class attribute, not a key: the ratio levels this algorithm can take

    def problems(self) -> Iterator[Problem]:
        yield from super().problems()
        if self.off_policy_correction not in OFF_POLICY_CORRECTIONS:
            yield "off_policy_correction", self.off_policy_correction, ", ".join(OFF_POLICY_CORRECTIONS)
        if not self.is_cap >= 1:
            yield "is_cap", self.is_cap, ">= 1"
        if self.setting("ratio_level") not in self.ratio_levels:
            yield "ratio_level", self.ratio_level, ", ".join(self.ratio_levels)
        if self.update_epochs < 1:
            yield "update_epochs", self.update_epochs, "an integer >= 1"
        if self.num_minibatches < 1:
            yield "num_minibatches", self.num_minibatches, "an integer >= 1"
        if self.target_kl is not None and not self.target_kl > 0:
            yield "target_kl", self.target_kl, "null or > 0"


@dataclass(frozen=True)
class Needs:
    """What an algorithm needs from the run, declared by the algorithm (``Algorithm.needs``) so that the runner,
    the config checks and the workers ask it instead of asking for a name."""

    critic: bool = False
    """A value estimate from the policy (``evaluate`` returns values it trains)."""
    groups: bool = False
    """Envs in lock-step groups of ``config.group_size`` sharing initial states, episodes run to the time limit."""
    reference: bool = False
    """A frozen copy of the initial policy; the actor adds ``ref_logp`` to every sample."""
    demonstrations: str = "none"
    """'none', 'only' (it trains on demonstrations and samples nothing: SFT) or 'mixed' (demonstration transitions
    mixed into its batches: RLPD)."""
    replay: bool = False
    """Off-policy: it trains from a replay buffer (``bind``, ``train``); env workers send ``next_obs``."""


class Algorithm:
    """The interface the actor worker calls. Subclasses register with ``@ALGORITHMS.register(name)`` and set
    ``config_class``; ``needs`` says what they need from the run.

    * ``select(batch)``: a raw batch of trajectories (``[T, B]`` tensors, see ``ActorWorker``) -> the part worth
      training on, as a dict of tensors, plus metrics (GRPO drops uninformative groups here).
    * ``enough(selected)``: whether the selected samples so far fill an update (else the runner samples more).
    * ``prepare(selected)``: -> flat training samples ``[N, ...]``: obs, actions, old_logp, and what ``loss`` uses.
    * ``minibatch_order(samples, generator)``: the order of the samples for one pass (default: shuffled).
    * ``evaluate(policy, minibatch)``: the policy's outputs the loss needs.
    * ``loss(outputs, minibatch)``: outputs of ``policy.evaluate`` (logp ``[n]``, entropy ``[n]``, values ``[n]``)
      -> ``(loss, metrics)``; metrics carry ``approx_kl`` for the actor's early stop.
    """

    config_class = UpdateConfig
    worlds = ("embodied",)  # where it runs: embodied tasks, and with "text" also text tasks (the GRPO family)

    @classmethod
    def needs(cls, config) -> Needs:
        """What a run of this algorithm with ``config`` needs (default: PPO's, a critic)."""
        return Needs(critic=True)

    def __init__(self, config):
        self.config = config

    def select(self, batch: dict) -> tuple[dict, dict]:
        return batch, {}

    def enough(self, selected: list[dict], rounds: int) -> bool:
        return True

    def state_dict(self) -> dict:
        """Counters the algorithm keeps across updates (ints and floats), saved in checkpoints."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict`` (a checkpoint from before the algorithm kept it gives {})."""

    def learning_rate(self, progress: float) -> float:
        """The learning rate when ``progress`` (0 to 1) of the stage is done (default: constant ``config.lr``)."""
        return self.config.lr

    def prepare(self, selected: list[dict]) -> tuple[dict, dict]:
        raise NotImplementedError

    def ratio_level(self) -> str:
        """Where the ratio is taken (``losses.RATIO_LEVELS``); the config's ``ratio_level`` (decision without one)."""
        return self.config.setting("ratio_level") if hasattr(self.config, "ratio_level") else "decision"

    def minibatch_order(self, samples: dict, generator: torch.Generator) -> torch.Tensor:
        """A permutation ``[N]`` of the prepared samples for one pass over them."""
        return torch.randperm(len(samples["old_logp"]), generator=generator)

    def evaluate(self, policy, minibatch: dict) -> dict:
        """The policy's outputs on a minibatch that ``loss`` needs: ``policy.evaluate`` of the stored actions
        (logp, entropy, values ``[n]``), and with ``ratio_level='token'`` also ``token_logp`` ``[n, M]`` from
        ``policy.evaluate_tokens`` (logp and entropy are then its sums over the M factors)."""
        if self.ratio_level() == "token":
            token_logp, token_entropy, values = policy.evaluate_tokens(minibatch["obs"], minibatch["actions"])
            return dict(logp=token_logp.sum(-1), entropy=token_entropy.sum(-1), values=values, token_logp=token_logp)
        logp, entropy, values = policy.evaluate(minibatch["obs"], minibatch["actions"])
        return dict(logp=logp, entropy=entropy, values=values)

    def surrogate(self, outputs: dict, minibatch: dict, advantages: torch.Tensor, clip_low: float,
                  clip_high: float) -> tuple[torch.Tensor, dict]:
        """The clipped policy-gradient loss at ``config.ratio_level``: per decision (``logp`` ``[n]`` against
        ``old_logp`` ``[n]``) or per token (``token_logp`` ``[n, M]`` against the ``stored.token_logp`` the
        rollout recorded, token-mean); ``advantages`` ``[n]``."""
        if "token_logp" in outputs:
            logp, old_logp = outputs["token_logp"], minibatch["obs"][TOKEN_LOGP].to(outputs["token_logp"].dtype)
        else:
            logp, old_logp = outputs["logp"][:, None], minibatch["old_logp"][:, None]
        if PROXIMAL_LOGP not in minibatch:
            return policy_loss(logp, old_logp, advantages, torch.ones_like(logp), clip_low, clip_high)
        # Decoupled PPO: clip around the proximal policy; a weight w >= 0 scales the advantage, and
        # max(-r A w, -clip(r) A w) = w max(-r A, -clip(r) A), so this is the importance-weighted clipped loss.
        proximal = minibatch[PROXIMAL_LOGP].to(logp.dtype).reshape(len(logp), -1)
        weights = truncated_is_weights(proximal, old_logp, self.config.is_cap)
        loss, metrics = policy_loss(logp, proximal, advantages[:, None] * weights, torch.ones_like(logp),
                                    clip_low, clip_high)
        metrics.update(is_weight_mean=weights.mean().item(),
                       is_truncated_fraction=(weights >= self.config.is_cap).float().mean().item())
        return loss, metrics

    def loss(self, outputs: dict, minibatch: dict) -> tuple[torch.Tensor, dict]:
        raise NotImplementedError


def importance_metrics(surrogate_metrics: dict) -> dict:
    """The decoupled-PPO weights' metrics of ``Algorithm.surrogate`` (none without them)."""
    return {k: surrogate_metrics[k] for k in ("is_weight_mean", "is_truncated_fraction") if k in surrogate_metrics}


def algorithm_needs(config) -> Needs:
    """What the algorithm named by ``config.name``, with that config, needs from the run."""
    return ALGORITHMS.get(config.name).needs(config)


def algorithm_config_class(name: str):
    """The config dataclass of algorithm ``name`` (KeyError listing the allowed names)."""
    return ALGORITHMS.get(name).config_class


def select_rows(x, index):
    """Rows ``index`` (a slice, or indices or a bool mask as a torch tensor) of a tensor, a numpy array (e.g.
    instruction strings, which stay numpy) or a dict of them."""
    if isinstance(x, dict):
        return {k: select_rows(v, index) for k, v in x.items()}
    if isinstance(x, np.ndarray) and isinstance(index, torch.Tensor):
        return x[index.cpu().numpy()]
    return x[index]


def concat_rows(parts: list):
    """Concatenate along the first axis tensors, numpy arrays or dicts of them."""
    if isinstance(parts[0], dict):
        return {k: concat_rows([p[k] for p in parts]) for k in parts[0]}
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts)
    return torch.cat(parts)


def flat_steps(x: torch.Tensor) -> torch.Tensor:
    """``[T, B, ...]`` -> ``[T * B, ...]``."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])
