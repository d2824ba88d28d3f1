"""Actor worker: gathers trajectories from the channel, computes GAE advantages and runs the PPO update.

Between its turns on a shared device the actor is offloaded: weights, gradients and Adam state go to host memory
(``offload``) and come back for the next update (``onload``). It refuses to train or load state while offloaded.
"""

from __future__ import annotations

import io
import time

import numpy as np
import torch

from embodied_rl.algorithms.advantages import gae
from embodied_rl.algorithms.losses import policy_loss, value_loss
from embodied_rl.models import build_policy
from embodied_rl.runtime import Worker
from embodied_rl.runtime.offload import MoveReport, Offloader
from embodied_rl.workers.messages import POLICY_VERSION_KEY, TRAJECTORIES_KEY, Trajectory
from embodied_rl.workers.weights import load_numpy_weights, weights_to_numpy


class ActorWorker(Worker):
    """Trains the policy with PPO. ``ppo`` holds the hyperparameters (see ``embodied_rl.config.schema.PPOConfig``)."""

    def __init__(self, policy: dict, ppo: dict, channel, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        torch.manual_seed(seed + self.rank)
        self.policy = build_policy(**policy).to(self.device)
        self.ppo = ppo
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=ppo["lr"], eps=1e-5)
        self.channel = channel
        self.channel.subscribe(TRAJECTORIES_KEY)
        self.policy_version = 0
        self.generator = torch.Generator().manual_seed(seed + 1000 + self.rank)
        self.offloader = Offloader([self.policy], [self.optimizer])

    def offload(self) -> MoveReport:
        """Move weights, gradients and optimizer state to host memory (a no-op for memory on CPU)."""
        return self.offloader.offload()

    def onload(self) -> MoveReport:
        """Move them back to the device for the next update."""
        return self.offloader.onload()

    def _require_onloaded(self, action: str) -> None:
        if self.offloader.offloaded:
            raise RuntimeError(f"actor worker {self.address} cannot {action} while offloaded; call onload() first "
                               "(in its turn on the device)")

    def get_weights(self) -> tuple[dict, int]:
        """``(state_dict as numpy arrays, policy version)``; reads the host copy when offloaded."""
        return weights_to_numpy(self.policy), self.policy_version

    def broadcast_weights(self, collective: str) -> int:
        """As rank 0 of ``collective``: send the weights and the policy version to every other rank."""
        state = {k: v.detach() for k, v in self.policy.state_dict().items()}
        state[POLICY_VERSION_KEY] = torch.tensor(self.policy_version, dtype=torch.int64)
        self.collectives[collective].broadcast_state_dict(state, src=0)
        return self.policy_version

    def update(self, num_trajectories: int) -> dict:
        """Take ``num_trajectories`` trajectories from the channel and run one PPO update; returns metrics."""
        self._require_onloaded("update")
        start = time.perf_counter()
        chunks: list[Trajectory] = []
        while len(chunks) < num_trajectories:
            chunks.extend(self.channel.get_batch(TRAJECTORIES_KEY, num_trajectories - len(chunks)))
        chunks.sort(key=lambda c: c.env_rank)
        batch = {name: torch.as_tensor(np.concatenate([getattr(c, name) for c in chunks], axis=1)).to(self.device)
                 for name in ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated",
                              "final_values")}
        next_value = torch.as_tensor(np.concatenate([c.next_value for c in chunks])).to(self.device)
        metrics = self._ppo_update(batch, next_value)
        staleness = self.policy_version - min(int(c.policy_versions.min()) for c in chunks)
        self.policy_version += 1
        metrics.update({"train/policy_version": self.policy_version, "train/policy_staleness": staleness,
                        "time/update_s": time.perf_counter() - start})
        return metrics

    def _ppo_update(self, batch: dict, next_value: torch.Tensor) -> dict:
        cfg = self.ppo
        rewards = batch["rewards"] * cfg["reward_scale"]
        dones = batch["terminated"] | batch["truncated"]
        # ManiSkill terminates an episode at success; with dense rewards, not bootstrapping there makes
        # success worth less than hovering next to it, and the policy learns to avoid finishing.
        bootstrap = dones if cfg["bootstrap_on_termination"] else batch["truncated"] & ~batch["terminated"]
        advantages, returns = gae(rewards, batch["values"], dones, next_value, cfg["gamma"], cfg["gae_lambda"],
                                  truncated=bootstrap, final_values=batch["final_values"])
        T, B = rewards.shape
        flat = lambda x: x.reshape(T * B, *x.shape[2:])  # noqa: E731
        obs, actions = flat(batch["obs"]), flat(batch["actions"])
        old_logp, old_values = flat(batch["logp"]), flat(batch["values"])
        advantages, returns = flat(advantages), flat(returns)
        n = T * B
        minibatch = max(1, n // cfg["num_minibatches"])
        sums = dict(policy_loss=0.0, value_loss=0.0, entropy=0.0, approx_kl=0.0, clip_fraction=0.0)
        updates, stopped_early = 0, False
        for _ in range(cfg["update_epochs"]):
            order = torch.randperm(n, generator=self.generator)
            for start in range(0, n - minibatch + 1, minibatch):
                idx = order[start:start + minibatch]
                logp, entropy, values = self.policy.evaluate(obs[idx], actions[idx])
                adv = advantages[idx]
                if cfg["normalize_advantages"]:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                ones = torch.ones_like(logp)[:, None]
                pg_loss, pg_metrics = policy_loss(logp[:, None], old_logp[idx][:, None], adv, ones,
                                                  cfg["clip_coef"], cfg["clip_coef"])
                # Checked before every step (as CleanRL does): one epoch of many small minibatches can
                # otherwise carry the policy far past the trust region before an epoch-level check sees it.
                if cfg["target_kl"] is not None and pg_metrics["approx_kl"] > cfg["target_kl"]:
                    stopped_early = True
                    break
                v_loss = value_loss(values, old_values[idx], returns[idx], cfg["value_clip"])
                loss = pg_loss - cfg["ent_coef"] * entropy.mean() + cfg["vf_coef"] * v_loss
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg["max_grad_norm"])
                self.optimizer.step()
                updates += 1
                for name, value in (("policy_loss", pg_loss.item()), ("value_loss", v_loss.item()),
                                    ("entropy", entropy.mean().item()), ("approx_kl", pg_metrics["approx_kl"]),
                                    ("clip_fraction", pg_metrics["clip_fraction"])):
                    sums[name] += value
            if stopped_early:
                break
        explained = 1 - torch.var(returns - old_values) / (torch.var(returns) + 1e-8)
        metrics = {f"train/{k}": v / max(updates, 1) for k, v in sums.items()}
        metrics.update({"train/explained_variance": explained.item(), "train/gradient_steps": updates,
                        "train/stopped_early": float(stopped_early),
                        "train/advantage_mean": advantages.mean().item(),
                        "train/return_mean": returns.mean().item(),
                        "train/reward_mean": batch["rewards"].mean().item()})
        return metrics

    # --- checkpointing --------------------------------------------------------------------------------------
    def training_state(self) -> dict:
        """Everything needed to resume: weights, optimizer, RNG states, version."""
        buffer = io.BytesIO()
        torch.save({"optimizer": self.optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
                    "shuffle_rng": self.generator.get_state(), "policy_version": self.policy_version}, buffer)
        weights, _ = self.get_weights()
        return {"weights": weights, "trainer_state": buffer.getvalue()}

    def load_training_state(self, weights: dict, trainer_state: bytes | None) -> int:
        # Loading replaces optimizer state, which onload could then not find: load only while onloaded.
        self._require_onloaded("load training state")
        load_numpy_weights(self.policy, weights)
        if trainer_state is not None:
            # On the host first: a checkpoint written on a GPU resumes on a CPU-only machine (and vice versa).
            state = torch.load(io.BytesIO(trainer_state), weights_only=False, map_location="cpu")
            self.optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["torch_rng"])
            self.generator.set_state(state["shuffle_rng"])
            self.policy_version = state["policy_version"]
        return self.policy_version
