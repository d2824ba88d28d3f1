"""PPO with GAE and a learned critic (the CleanRL / ManiSkill baseline form), per environment step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import torch

from embodied_rl.algorithms.advantages import gae
from embodied_rl.algorithms.embodied.base import (ALGORITHMS, Algorithm, Problem, UpdateConfig, flat_steps,
                                                  importance_metrics)
from embodied_rl.algorithms.losses import value_loss


@dataclass
class PPOConfig(UpdateConfig):
    name: str = "ppo"
    """The algorithm: a name registered in ``ALGORITHMS`` (ppo, grpo, sac, rlpd, sft)."""
    gamma: float = 0.8
    """Discount factor."""
    gae_lambda: float = 0.9
    """GAE lambda."""
    clip_coef: float = 0.2
    """PPO ratio clip."""
    value_clip: Optional[float] = None
    """Clip value updates to this range around the old values (None: unclipped)."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    normalize_advantages: bool = True
    """Normalize advantages per minibatch."""
    reward_scale: float = 1.0
    """Multiply rewards by this before GAE."""
    bootstrap_on_termination: bool = True
    """Bootstrap from V(final observation) at terminations too (ManiSkill ends episodes at success)."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over ``total_env_steps`` (CleanRL's default): the policy settles at
    the end of a run instead of drifting away from its best."""
    critic_lr_scale: float = 1.0
    """The critic's learning rate is ``lr`` times this (a policy fine-tuned from SFT needs small actor steps while
    its fresh critic has everything to learn)."""
    critic_warmup_updates: int = 0
    """Train only the critic for this many updates (a policy started from SFT has an untrained critic whose
    advantages would first pull it away from what it cloned)."""

    def problems(self) -> Iterator[Problem]:
        yield from super().problems()
        if not 0 <= self.gamma <= 1:
            yield "gamma", self.gamma, "0 <= gamma <= 1"
        if not 0 <= self.gae_lambda <= 1:
            yield "gae_lambda", self.gae_lambda, "0 <= gae_lambda <= 1"
        if not self.clip_coef > 0:
            yield "clip_coef", self.clip_coef, "> 0"
        if self.value_clip is not None and not self.value_clip > 0:
            yield "value_clip", self.value_clip, "null or > 0"
        if self.vf_coef < 0:
            yield "vf_coef", self.vf_coef, ">= 0"
        if self.ent_coef < 0:
            yield "ent_coef", self.ent_coef, ">= 0"
        if not self.critic_lr_scale > 0:
            yield "critic_lr_scale", self.critic_lr_scale, "> 0"
        if self.critic_warmup_updates < 0:
            yield "critic_warmup_updates", self.critic_warmup_updates, "an integer >= 0"


def flat_obs(obs):
    """Observation ``[T, B, ...]`` (array or dict of arrays) -> ``[T * B, ...]``."""
    if isinstance(obs, dict):
        return {k: flat_steps(v) for k, v in obs.items()}
    return flat_steps(obs)


@ALGORITHMS.register("ppo")
class PPO(Algorithm):
    config_class = PPOConfig

    def __init__(self, config):
        super().__init__(config)
        self.updates = 0  # prepared batches so far: the critic warm-up counts them

    def state_dict(self) -> dict:
        return {"updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.updates = int(state.get("updates", 0))

    def learning_rate(self, progress: float) -> float:
        return self.config.lr * (1.0 - min(max(progress, 0.0), 1.0)) if self.config.anneal_lr else self.config.lr

    def prepare(self, selected: list[dict]) -> tuple[dict, dict]:
        """One batch of ``[T, B]`` steps -> flat samples with GAE advantages and returns."""
        (batch,) = selected
        c = self.config
        self.updates += 1
        rewards = batch["rewards"] * c.reward_scale
        dones = batch["terminated"] | batch["truncated"]
        # ManiSkill terminates an episode at success; with dense rewards, not bootstrapping there makes
        # success worth less than hovering next to it, and the policy learns to avoid finishing.
        bootstrap = dones if c.bootstrap_on_termination else batch["truncated"] & ~batch["terminated"]
        advantages, returns = gae(rewards, batch["values"], dones, batch["next_value"], c.gamma, c.gae_lambda,
                                  truncated=bootstrap, final_values=batch["final_values"])
        samples = dict(obs=flat_obs(batch["obs"]), actions=flat_steps(batch["actions"]),
                       old_logp=flat_steps(batch["logp"]), old_values=flat_steps(batch["values"]),
                       advantages=flat_steps(advantages), returns=flat_steps(returns))
        explained = 1 - torch.var(samples["returns"] - samples["old_values"]) / (torch.var(samples["returns"]) + 1e-8)
        metrics = {"train/explained_variance": explained.item(), "train/advantage_mean": advantages.mean().item(),
                   "train/return_mean": returns.mean().item(), "train/reward_mean": batch["rewards"].mean().item()}
        return samples, metrics

    def loss(self, outputs: dict, minibatch: dict) -> tuple[torch.Tensor, dict]:
        c = self.config
        adv = minibatch["advantages"]
        if c.normalize_advantages:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        pg_loss, pg_metrics = self.surrogate(outputs, minibatch, adv, c.clip_coef, c.clip_coef)
        v_loss = value_loss(outputs["values"], minibatch["old_values"], minibatch["returns"], c.value_clip)
        entropy = outputs["entropy"].mean()
        if self.updates <= c.critic_warmup_updates:
            loss = c.vf_coef * v_loss
        else:
            loss = pg_loss - c.ent_coef * entropy + c.vf_coef * v_loss
        return loss, {"policy_loss": pg_loss.item(), "value_loss": v_loss.item(), "entropy": entropy.item(),
                      "approx_kl": pg_metrics["approx_kl"], "clip_fraction": pg_metrics["clip_fraction"],
                      **importance_metrics(pg_metrics)}
