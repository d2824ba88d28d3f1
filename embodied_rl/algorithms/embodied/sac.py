"""Off-policy learners: SAC (Haarnoja et al. 2018, with learned temperature; the form of CleanRL's and ManiSkill's
baselines) and RLPD (Ball et al. 2023: SAC whose every batch is half online transitions, half demonstrations, with
a min over a random pair of a layer-normalised critic ensemble).

The replay buffer lives with the algorithm inside the actor worker and is saved in its checkpoints; trajectories
come from the same env and rollout workers as PPO's, with the observation after every step (``next_obs``). A
decision is one policy output: with action chunks of K steps, its action is the flat chunk ``[K * A]``, its reward
the chunk's summed reward, and ``gamma`` discounts per decision.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Iterator, Optional

import torch

from embodied_rl.algorithms.embodied.base import ALGORITHMS, Algorithm, Needs, OptimizerConfig, Problem, flat_steps
from embodied_rl.algorithms.embodied.sft import DemonstrationSettings
from embodied_rl.algorithms.replay import ReplayBuffer

BOOTSTRAP_AT = ("truncation", "always")


@dataclass
class SACConfig(OptimizerConfig):
    name: str = "sac"
    """The algorithm: a name registered in ``ALGORITHMS``."""
    lr: float = 3e-4
    """Adam learning rate of the actor (and of the temperature)."""
    critic_lr: Optional[float] = None
    """Adam learning rate of the critics (None: ``lr``)."""
    max_grad_norm: float = 10.0
    """Gradient clipping norm (of actor and critics separately)."""
    gamma: float = 0.8
    """Discount per decision."""
    tau: float = 0.01
    """Polyak rate of the target critics."""
    batch_size: int = 256
    """Transitions per gradient step."""
    buffer_size: int = 1_000_000
    """Transitions the replay buffer keeps (the oldest go first)."""
    learning_starts: int = 4000
    """Transitions in the buffer before the first gradient step."""
    utd_ratio: float = 0.5
    """Gradient steps per collected transition (update-to-data ratio; fractions carry over to the next update)."""
    policy_frequency: int = 1
    """Update the actor (and temperature) once every this many critic steps."""
    critic_warmup_steps: int = 0
    """Gradient steps that train only the critics (a policy fine-tuned from SFT starts with untrained critics,
    whose first opinions would pull it away from what it cloned)."""
    init_alpha: float = 1.0
    """The entropy temperature at the start."""
    autotune_alpha: bool = True
    """Learn the temperature so the policy's entropy meets ``target_entropy`` (False: ``init_alpha`` throughout)."""
    target_entropy: Optional[float] = None
    """Entropy the temperature aims at (None: minus the decision's dimensions, SAC's rule)."""
    bootstrap_at: str = "always"
    """Where the TD target bootstraps from the next observation: 'always' (also where the task terminated the
    episode at success: ManiSkill's SAC and our PPO do this, since hovering next to the goal must not pay more
    than finishing) or 'truncation' (not at terminations, the textbook form)."""
    reward_scale: float = 1.0
    """Multiply rewards by this."""
    q_subsample: Optional[int] = None
    """The TD target takes the min over this many critics drawn at random (RLPD: 2 of an ensemble of 10); None:
    over all of them (SAC's twin-Q min)."""
    clone_kl_weight: float = 0.0
    """Fine-tuning a clone (needs the residual actor, ``policy.options.residual=true``): > 0 makes the actor loss
    SAC's divided by the batch's mean ``|Q|`` (TD3+BC's scale, so the weight means the same whatever the rewards'
    size) plus this weight times ``KL(pi(.|s) || clone(.|s))`` (nats per decision, exact: both are Gaussians before
    the same tanh), averaged over the batch's states: a trust region around the clone, where the critic's
    consistent action gradient otherwise moves a clone of small precise moves away within ~40 actor steps."""
    clone_entropy_target: bool = False
    """The temperature aims at the clone's own entropy (``-log pi`` of the clone's draws on the first actor batch,
    kept from then on; needs the residual actor) instead of ``target_entropy``: a clone of narrow moves sits far
    under SAC's ``-dimensions`` rule, which would otherwise keep raising the temperature."""

    def problems(self) -> Iterator[Problem]:
        yield from super().problems()
        if self.critic_lr is not None and not self.critic_lr > 0:
            yield "critic_lr", self.critic_lr, "null or > 0"
        if not 0 <= self.gamma <= 1:
            yield "gamma", self.gamma, "0 <= gamma <= 1"
        if not 0 < self.tau <= 1:
            yield "tau", self.tau, "0 < tau <= 1"
        if self.batch_size < 1:
            yield "batch_size", self.batch_size, "an integer >= 1"
        if self.buffer_size < self.batch_size:
            yield "buffer_size", self.buffer_size, f"an integer >= batch_size ({self.batch_size})"
        if self.learning_starts < 0:
            yield "learning_starts", self.learning_starts, "an integer >= 0"
        if not self.utd_ratio > 0:
            yield "utd_ratio", self.utd_ratio, "> 0"
        if self.policy_frequency < 1:
            yield "policy_frequency", self.policy_frequency, "an integer >= 1"
        if self.critic_warmup_steps < 0:
            yield "critic_warmup_steps", self.critic_warmup_steps, "an integer >= 0"
        if not self.init_alpha > 0:
            yield "init_alpha", self.init_alpha, "> 0"
        if self.bootstrap_at not in BOOTSTRAP_AT:
            yield "bootstrap_at", self.bootstrap_at, ", ".join(BOOTSTRAP_AT)
        if self.q_subsample is not None and self.q_subsample < 1:
            yield "q_subsample", self.q_subsample, "null or an integer >= 1"
        if not self.clone_kl_weight >= 0:
            yield "clone_kl_weight", self.clone_kl_weight, ">= 0"


@dataclass
class RLPDConfig(SACConfig, DemonstrationSettings):
    name: str = "rlpd"
    """The algorithm: a name registered in ``ALGORITHMS``."""
    demo_ratio: float = 0.5
    """Share of every batch drawn from the demonstrations (RLPD's symmetric sampling: 0.5)."""
    q_subsample: Optional[int] = 2
    """The TD target takes the min over this many critics drawn at random (RLPD: 2; the policy's ``num_q`` sets
    the ensemble)."""
    learning_starts: int = 0
    """Transitions in the buffer before the first gradient step (demonstrations fill the other half at once)."""
    bc_weight: float = 0.0
    """Behaviour cloning on the batch's demonstrations, for fine-tuning a cloned policy (TD3+BC's form): > 0 makes
    the actor loss SAC's divided by the batch's mean ``|Q|`` plus ``bc_weight`` times the mean squared error between
    the policy's mean action and the demonstrated one (TD3+BC's alpha 2.5 is 0.4): it holds the actor near the
    demonstrated actions where a young critic would pull it elsewhere."""

    def problems(self) -> Iterator[Problem]:
        yield from super().problems()
        if not 0 < self.demo_ratio < 1:
            yield "demo_ratio", self.demo_ratio, "0 < demo_ratio < 1"
        if not self.bc_weight >= 0:
            yield "bc_weight", self.bc_weight, ">= 0"
        yield from self.demo_problems()


# --- the losses, as pure functions of tensors -------------------------------------------------------------------
def soft_td_target(rewards: torch.Tensor, bootstrap: torch.Tensor, next_q: torch.Tensor, next_logp: torch.Tensor,
                   alpha: float, gamma: float) -> torch.Tensor:
    """``r + gamma * bootstrap * (Q'(s', a') - alpha * log pi(a'|s'))`` ``[n]``; all inputs ``[n]``, ``next_q`` the
    min over the target critics taken."""
    return rewards + gamma * bootstrap * (next_q - alpha * next_logp)


def critic_loss(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum over the ensemble of each critic's mean squared TD error: q ``[num_q, n]``, target ``[n]``."""
    return ((q - target[None]) ** 2).mean(dim=1).sum()


def actor_loss(q_pi: torch.Tensor, logp: torch.Tensor, alpha: float) -> torch.Tensor:
    """``mean(alpha * log pi(a|s) - Q(s, a))`` over fresh draws ``a``: q_pi ``[n]`` (min over the critics, or
    their mean), logp ``[n]``."""
    return (alpha * logp - q_pi).mean()


def actor_loss_with_bc(q_pi: torch.Tensor, logp: torch.Tensor, alpha: float, bc_error: torch.Tensor,
                       bc_weight: float) -> torch.Tensor:
    """TD3+BC's form: ``actor_loss / mean(|q_pi|) + bc_weight * bc_error``; q_pi, logp ``[n]``, ``bc_error`` a
    scalar (mean squared action error on the demonstrations); the scale ``mean|q_pi|`` carries no gradient."""
    return actor_loss(q_pi, logp, alpha) / q_pi.detach().abs().mean().clamp_min(1e-6) + bc_weight * bc_error


def clone_kl(policy_dist: torch.distributions.Normal, clone_dist: torch.distributions.Normal) -> torch.Tensor:
    """``KL(policy || clone)`` per state ``[n]``: two diagonal Gaussians over ``u`` ``[n, M]``, summed over M."""
    return torch.distributions.kl_divergence(policy_dist, clone_dist).sum(-1)


def temperature_loss(log_alpha: torch.Tensor, logp: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """``mean(-alpha * (log pi + target_entropy))``: the temperature rises while the entropy ``-log pi`` is under
    the target and falls while above it; logp ``[n]`` (no gradient to the actor)."""
    return (-log_alpha.exp() * (logp.detach() + target_entropy)).mean()


def polyak(target: torch.nn.Module, source: torch.nn.Module, tau: float) -> None:
    """``target <- (1 - tau) target + tau source``, parameter by parameter."""
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters()):
            t.lerp_(s, tau)


def flat_obs(obs):
    """``[T, B, ...]`` (array or dict) -> ``[T * B, ...]``."""
    return {k: flat_steps(v) for k, v in obs.items()} if isinstance(obs, dict) else flat_steps(obs)


@ALGORITHMS.register("sac")
class SAC(Algorithm):
    """Off-policy: ``prepare`` turns a round's trajectories into transitions, ``train`` adds them to the replay
    buffer and takes ``utd_ratio`` gradient steps per new transition. Needs a policy with ``sample`` and
    ``q_values`` (``mlp_sac``)."""

    config_class = SACConfig

    @classmethod
    def needs(cls, config) -> Needs:
        return Needs(critic=True, replay=True)

    def __init__(self, config):
        super().__init__(config)
        self.replay = ReplayBuffer(config.buffer_size)
        self.demos: ReplayBuffer | None = None
        self.policy = None
        self.gradient_steps = 0
        self.owed_steps = 0.0  # the fraction of a gradient step that ``utd_ratio`` leaves over

    # --- set-up --------------------------------------------------------------------------------------------
    def bind(self, policy: torch.nn.Module, device: torch.device) -> None:
        """Make the target critics, the optimizers and the temperature for ``policy``."""
        c = self.config
        self.policy, self.device = policy, device
        self.target_critics = copy.deepcopy(policy.critic_q).requires_grad_(False)
        critic = [p for n, p in policy.named_parameters() if n.startswith("critic")]
        actor = [p for n, p in policy.named_parameters() if not n.startswith("critic")]
        self.actor_optimizer = torch.optim.Adam(actor, lr=c.lr)
        self.critic_optimizer = torch.optim.Adam(critic, lr=c.critic_lr or c.lr)
        self.log_alpha = torch.tensor(float(c.init_alpha), device=device).log().requires_grad_(c.autotune_alpha)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=c.lr)
        self.target_entropy = (-float(policy.decision_dim) if c.target_entropy is None else float(c.target_entropy))
        self.clone_entropy: float | None = None  # measured at the first actor step with clone_entropy_target
        if (c.clone_kl_weight > 0 or c.clone_entropy_target) and not getattr(policy, "residual", False):
            raise ValueError("algorithm.clone_kl_weight and clone_entropy_target need the residual actor "
                             "(policy.options.residual=true)")

    def reset_targets(self) -> None:
        """Target critics equal to the critics (after weights were loaded into the policy)."""
        self.target_critics.load_state_dict(self.policy.critic_q.state_dict())

    def add_demonstrations(self, transitions: dict) -> int:
        """Keep demonstration transitions (``TRANSITION_KEYS``) for the demo half of every batch; returns n."""
        n = len(transitions["rewards"])
        self.demos = ReplayBuffer(max(n, 1))
        self.demos.add(transitions)
        return n

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.detach().exp())

    # --- one round -----------------------------------------------------------------------------------------
    def prepare(self, selected: list[dict]) -> tuple[dict, dict]:
        """Trajectories ``[T, B]`` with ``next_obs`` -> flat transitions ``[N]`` (see ``replay.TRANSITION_KEYS``)."""
        (batch,) = selected
        if "next_obs" not in batch:
            raise ValueError("off-policy learning needs trajectories with next_obs (env workers started with "
                             "store_next_obs)")
        bootstrap = torch.ones_like(batch["rewards"]) if self.config.bootstrap_at == "always" else \
            (~batch["terminated"]).to(batch["rewards"].dtype)
        actions = batch["actions"]
        transitions = dict(obs=flat_obs(batch["obs"]),
                           actions=actions.reshape(actions.shape[0] * actions.shape[1], -1),
                           rewards=flat_steps(batch["rewards"]) * self.config.reward_scale,
                           next_obs=flat_obs(batch["next_obs"]), bootstrap=flat_steps(bootstrap))
        return transitions, {"train/reward_mean": batch["rewards"].mean().item()}

    def train(self, transitions: dict, generator: torch.Generator, learning_rate: float) -> dict:
        """Add ``transitions`` to the replay buffer, then ``utd_ratio`` gradient steps per transition added (none
        until the buffer holds ``learning_starts``); returns the mean of each loss metric."""
        c = self.config
        self.replay.add(transitions)
        for group in self.actor_optimizer.param_groups + self.alpha_optimizer.param_groups:
            group["lr"] = learning_rate
        for group in self.critic_optimizer.param_groups:
            group["lr"] = (c.critic_lr or c.lr) * learning_rate / c.lr
        metrics = {"train/replay_size": len(self.replay), "train/alpha": self.alpha}
        if len(self.replay) < max(c.learning_starts, 1):
            return {**metrics, "train/gradient_steps": 0}
        self.owed_steps += c.utd_ratio * len(transitions["rewards"])
        steps, self.owed_steps = int(self.owed_steps), self.owed_steps - int(self.owed_steps)
        sums: dict[str, float] = {}
        for _ in range(steps):
            for name, value in self.gradient_step(self.sample_batch(generator), generator).items():
                sums[name] = sums.get(name, 0.0) + value
        metrics.update({f"train/{k}": v / max(steps, 1) for k, v in sums.items()})
        metrics.update({"train/gradient_steps": steps, "train/alpha": self.alpha})
        return metrics

    def sample_batch(self, generator: torch.Generator) -> dict:
        """``batch_size`` transitions from the replay buffer (RLPD: ``demo_ratio`` of them from the demos)."""
        c = self.config
        if self.demos is None or not len(self.demos):
            return self.replay.sample(c.batch_size, generator)
        from_demos = int(round(c.batch_size * c.demo_ratio))
        online = self.replay.sample(c.batch_size - from_demos, generator)
        demos = self.demos.sample(from_demos, generator)
        return dict(_cat(online, demos), demo_rows=from_demos)

    def _min_target_q(self, obs, actions, generator: torch.Generator) -> torch.Tensor:
        """Min over the target critics (or over ``q_subsample`` of them drawn at random) ``[n]``."""
        inputs = torch.cat([self.policy.features(obs), actions], dim=-1)
        critics = list(range(len(self.target_critics)))
        if self.config.q_subsample is not None and self.config.q_subsample < len(critics):
            critics = torch.randperm(len(critics), generator=generator)[:self.config.q_subsample].tolist()
        return torch.stack([self.target_critics[i](inputs).squeeze(-1) for i in critics]).min(dim=0).values

    def gradient_step(self, batch: dict, generator: torch.Generator) -> dict:
        """One critic step, (every ``policy_frequency``) one actor and temperature step, and the Polyak update of the
        target critics, on ``batch`` (``TRANSITION_KEYS``)."""
        c, policy = self.config, self.policy
        alpha = self.alpha
        with torch.no_grad():
            next_actions, next_logp = policy.sample(batch["next_obs"])
            next_q = self._min_target_q(batch["next_obs"], next_actions, generator)
            target = soft_td_target(batch["rewards"], batch["bootstrap"], next_q, next_logp, alpha, c.gamma)
        q = policy.q_values(batch["obs"], batch["actions"])
        q_loss = critic_loss(q, target)
        self.critic_optimizer.zero_grad(set_to_none=True)
        q_loss.backward()
        torch.nn.utils.clip_grad_norm_(self.critic_optimizer.param_groups[0]["params"], c.max_grad_norm)
        self.critic_optimizer.step()
        metrics = {"critic_loss": q_loss.item(), "q_mean": q.mean().item(), "td_target_mean": target.mean().item()}
        self.gradient_steps += 1
        if self.gradient_steps > c.critic_warmup_steps and self.gradient_steps % c.policy_frequency == 0:
            actions, logp = policy.sample(batch["obs"])
            q_pi = policy.q_values(batch["obs"], actions)
            # RLPD and SAC both take the actor's objective over the mean of the ensemble's opinion when it is
            # larger than a pair; with two critics this is their min, as in SAC.
            q_pi = q_pi.min(dim=0).values if len(q_pi) <= 2 else q_pi.mean(dim=0)
            pi_loss = self.actor_objective(batch, q_pi, logp, alpha, metrics)
            if c.clone_kl_weight > 0:
                kl = clone_kl(policy.distribution(batch["obs"]), policy.clone_distribution(batch["obs"])).mean()
                pi_loss = pi_loss / q_pi.detach().abs().mean().clamp_min(1e-6) + c.clone_kl_weight * kl
                metrics["clone_kl"] = kl.item()
            if c.clone_entropy_target and self.clone_entropy is None:
                self.clone_entropy = policy.clone_entropy(batch["obs"])
                self.target_entropy = self.clone_entropy
            self.actor_optimizer.zero_grad(set_to_none=True)
            pi_loss.backward()
            torch.nn.utils.clip_grad_norm_(self.actor_optimizer.param_groups[0]["params"], c.max_grad_norm)
            self.actor_optimizer.step()
            policy.zero_grad(set_to_none=True)  # the actor loss also reached the critics; their step is done
            metrics.update(actor_loss=pi_loss.item(), entropy=-logp.mean().item())
            if c.autotune_alpha:
                a_loss = temperature_loss(self.log_alpha, logp, self.target_entropy)
                metrics["target_entropy"] = self.target_entropy
                self.alpha_optimizer.zero_grad(set_to_none=True)
                a_loss.backward()
                self.alpha_optimizer.step()
                metrics["alpha_loss"] = a_loss.item()
        polyak(self.target_critics, policy.critic_q, c.tau)
        return metrics

    def actor_objective(self, batch: dict, q_pi: torch.Tensor, logp: torch.Tensor, alpha: float,
                        metrics: dict) -> torch.Tensor:
        """The actor's loss on ``batch`` from fresh draws' ``q_pi`` and ``logp`` ``[n]``: SAC's."""
        return actor_loss(q_pi, logp, alpha)

    # --- checkpoints ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"gradient_steps": self.gradient_steps, "owed_steps": self.owed_steps,
                "replay": self.replay.state_dict(), "target_critics": self.target_critics.state_dict(),
                "actor_optimizer": self.actor_optimizer.state_dict(),
                "critic_optimizer": self.critic_optimizer.state_dict(),
                "log_alpha": self.log_alpha.detach().cpu(), "alpha_optimizer": self.alpha_optimizer.state_dict(),
                "clone_entropy": self.clone_entropy}

    def load_state_dict(self, state: dict) -> None:
        if not state:
            self.reset_targets()
            return
        self.gradient_steps = int(state["gradient_steps"])
        self.owed_steps = float(state["owed_steps"])
        self.replay.load_state_dict(state["replay"], self.device)
        self.target_critics.load_state_dict(state["target_critics"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"].to(self.device))
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.clone_entropy = state.get("clone_entropy")
        if self.clone_entropy is not None:
            self.target_entropy = self.clone_entropy


@ALGORITHMS.register("rlpd")
class RLPD(SAC):
    """SAC with demonstrations in every batch (``demo_ratio``) and a min over a random pair of critics."""

    config_class = RLPDConfig

    @classmethod
    def needs(cls, config) -> Needs:
        return Needs(critic=True, replay=True, demonstrations="mixed")

    def actor_objective(self, batch, q_pi, logp, alpha, metrics):
        """SAC's, or with ``bc_weight`` TD3+BC's on the batch's demonstration rows (the last ``demo_rows``)."""
        rows = batch.get("demo_rows", 0)
        if not (self.config.bc_weight > 0 and rows > 0):
            return actor_loss(q_pi, logp, alpha)
        bc_error = self.policy.supervised_loss(_tail(batch["obs"], rows), batch["actions"][-rows:])
        metrics["bc_loss"] = bc_error.item()
        return actor_loss_with_bc(q_pi, logp, alpha, bc_error, self.config.bc_weight)


def _tail(obs, n: int):
    """The last ``n`` rows of an observation batch (array or dict)."""
    return {k: v[-n:] for k, v in obs.items()} if isinstance(obs, dict) else obs[-n:]


def _cat(a, b):
    if isinstance(a, dict):
        return {k: _cat(a[k], b[k]) for k in a}
    return torch.cat([a, b.to(a.device)])
