"""Actor worker: owns the optimizer and the minibatch loop; the algorithm (PPO, GRPO, SFT, ...) turns collected
trajectories or demonstrations into a loss.

Between its turns on a shared device the actor is offloaded: weights, gradients and Adam state go to host memory
(``offload``) and come back for the next update (``onload``). It refuses to train or load state while offloaded.

Sharded (``data_parallel={backend: fsdp, master_address, master_port, ...}``, ``actor.backend=fsdp`` with
``actor.world_size`` N): N such workers are one actor, the policy's weights, gradients and Adam state sharded over
them by FSDP2 (one shard group per transformer block of a VLA). Rank 0 alone reads the trajectory channel and hands
each round's trajectories to the others; every rank then selects and prepares the same samples, draws the same
minibatches, and computes its slice of each (``micro_batches.py``: the gradient of the whole minibatch).
``update``, ``sft_update``, ``get_weights``, ``broadcast_weights``, ``training_state`` and
``load_training_state`` are collective: the run calls them on every rank at once; rank 0 returns the metrics, the
whole model and the checkpoint, the others None where a result is the model's.
"""

from __future__ import annotations

import io
import sys
import time
import warnings

import numpy as np
import torch

from embodied_rl.algorithms.embodied import ALGORITHMS
from embodied_rl.algorithms.embodied.base import PROXIMAL_LOGP, select_rows
from embodied_rl.engines.training import DataParallelConfig, DataParallelEngine
from embodied_rl.models import build_policy
from embodied_rl.runtime import Worker
from embodied_rl.runtime.channel import ChannelTimeout
from embodied_rl.runtime.offload import MoveReport, Offloader
from embodied_rl.utils.checkpoint import read_trainer_state
from embodied_rl.workers.messages import POLICY_VERSION_KEY, TRAJECTORIES_KEY, Trajectory
from embodied_rl.workers.micro_batches import minibatch_loss, rank_passes
from embodied_rl.workers.optimizer_groups import parameter_groups, renumbered_optimizer_state
from embodied_rl.workers.trajectory_buffer import concat_obs
from embodied_rl.workers.weights import as_tensor, load_host_weights, trained_names, weights_template, host_weights

TRAJECTORY_TIMEOUT_S = 120.0
"""Trajectories are on the channel by the time ``update`` is called (their env workers have returned); a longer
wait means one was lost, and the error names the round and the env ranks still missing. Runs pass
``fault.hang_timeout_s``."""

FORWARD_METHODS = ("evaluate", "evaluate_tokens", "supervised_loss")
"""Policy methods that run the network (FSDP gathers the policy's own weights around them as around ``forward``)."""


class ActorWorker(Worker):
    """Trains the policy with the algorithm ``algorithm`` names (a config dataclass of
    ``embodied_rl.algorithms.embodied``): RL updates on trajectories from the channel, or SFT on demonstrations."""

    def __init__(self, policy: dict, algorithm, channel, seed: int = 0,
                 trajectory_timeout_s: float = TRAJECTORY_TIMEOUT_S, micro_batch_size: int | None = None,
                 activation_checkpointing: bool = False, data_parallel: dict | None = None, **kwargs):
        super().__init__(**kwargs)
        parallel = {"rank": self.rank, "world_size": self.world_size, **data_parallel} if data_parallel else {}
        if parallel and self.device.type == "cuda":  # the ranks share their component's GPU slots: one each
            self.device = torch.device("cuda", self.rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        self.trajectory_timeout_s = trajectory_timeout_s
        self.micro_batch_size = micro_batch_size
        self.action_dim = int(policy["action_dim"])
        self.held: list[Trajectory] = []  # trajectories of later sampling rounds than the one being trained
        self.stale_dropped = 0  # trajectories of other rounds than the one they reached the actor for, dropped
        self.env_steps_trained = 0  # env steps of the trajectories that updates trained on (``train/...``)
        self.pending_env_steps = 0  # env steps of the rounds in ``pending``
        torch.manual_seed(seed + (0 if parallel else self.rank))
        self.policy = build_policy(**policy).to(self.device)
        if activation_checkpointing:
            self.policy.enable_activation_checkpointing()
        self.algorithm = ALGORITHMS.get(algorithm.name)(algorithm)
        self.needs = self.algorithm.needs(algorithm)
        if parallel and (self.needs.replay or getattr(self.policy, "compute_dtype", None) == torch.float16):
            raise ValueError("a sharded actor (actor.backend=fsdp) trains on-policy algorithms in float32 or bf16; "
                             "off-policy learners keep their own optimizers and fp16 needs a loss scaler per rank")
        if parallel:  # the policy's methods return views (e.g. a squeezed value); nothing here edits them in place
            warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
        # Sharding replaces the parameters (FSDP's DTensors): the optimizer is made after it, over the shards.
        self.engine = DataParallelEngine(self.policy, DataParallelConfig(**parallel), self.device, FORWARD_METHODS)
        self.engine.check_same(seed, "the actor's seed")  # the minibatch rows are drawn alike on every rank
        self.optimizer = torch.optim.Adam(parameter_groups(self.policy, getattr(algorithm, "critic_lr_scale", 1.0)),
                                          lr=algorithm.lr, eps=1e-5)
        if self.engine.rank == 0:
            trained = sum(p.numel() for group in self.optimizer.param_groups for p in group["params"])
            frozen = sum(p.numel() for p in self.policy.parameters()) - trained
            print(f"actor {self.address}: policy {policy['name']}: {trained:,} parameters trained, {frozen:,} "
                  "frozen", file=sys.stderr, flush=True)
        # fp16 compute: scale the loss so small gradients survive fp16 activations (bf16 has fp32's range)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=getattr(
            self.policy, "compute_dtype", torch.float32) == torch.float16)
        if self.needs.replay:
            # Its replay buffer, target critics and optimizers live in the algorithm, on this device (the
            # offloader moves only the policy and ``optimizer``: off-policy learners keep theirs in place).
            self.algorithm.bind(self.policy, self.device)
        self.channel = channel
        if self.engine.rank == 0:  # the other ranks get each round's trajectories from it
            self.channel.subscribe(TRAJECTORIES_KEY)
        self.policy_version = 0
        self.generator = torch.Generator().manual_seed(seed + 1000 + (0 if parallel else self.rank))
        self.offloader = Offloader([self.policy], [self.optimizer])
        self.pending: list[dict] = []  # selected samples of the sampling rounds of the next update
        self.reference = None  # frozen copy of the initial policy, for algorithms with a KL to it
        self.demonstrations: dict | None = None
        self.supervised_steps = 0  # gradient steps of SFT so far (its learning-rate schedule)
        self.weights_loaded = False  # weights came from a checkpoint (their observation statistics with them)

    def offload(self) -> MoveReport:
        """Move weights, gradients and optimizer state to host memory (a no-op for memory on CPU). Not for a sharded
        actor on a GPU: FSDP's parameters are views into its own shard buffers, which a swap of ``param.data``
        would leave behind (the config refuses it; this guards the worker)."""
        if self.engine.distributed and self.device.type == "cuda":
            raise RuntimeError(f"actor worker {self.address}: a sharded actor on a GPU is not offloaded "
                               "(placement.offload=never)")
        return self.offloader.offload()

    def onload(self) -> MoveReport:
        """Move them back to the device for the next update."""
        return self.offloader.onload()

    def _require_onloaded(self, action: str) -> None:
        if self.offloader.offloaded:
            raise RuntimeError(f"actor worker {self.address} cannot {action} while offloaded; call onload() first "
                               "(in its turn on the device)")

    def get_weights(self, only_trained: bool = False) -> tuple[dict, int] | None:
        """``(state_dict as host tensors of their own dtype, policy version)``; reads the host copy when offloaded.
        ``only_trained``: leave out frozen weights (a LoRA base) for receivers that already hold them. Sharded:
        gathered from every rank; rank 0 returns them, the others None."""
        if not self.engine.distributed:
            return host_weights(self.policy, only_trained), self.policy_version
        state = self._full_state(only_trained)
        return None if state is None else (host_weights(state=state), self.policy_version)

    def _full_state(self, only_trained: bool) -> dict | None:
        """The sharded policy's whole state dict (``only_trained``: just its ``trained_names``, the only entries
        gathered) on rank 0, else None."""
        return self.engine.full_state_dict(names=trained_names(self.policy) if only_trained else None)

    def broadcast_weights(self, collective: str, only_trained: bool = False) -> int | None:
        """As rank 0 of ``collective``: send the weights (``only_trained``: without frozen ones) and the policy
        version to every other rank. Sharded: every rank takes part in gathering them; the others return None."""
        if self.engine.distributed:
            state = self._full_state(only_trained)
            if state is None:
                return None
        else:
            state = {k: v.detach() for k, v in weights_template(self.policy, only_trained).items()}
        state[POLICY_VERSION_KEY] = torch.tensor(self.policy_version, dtype=torch.int64)
        self.collectives[collective].broadcast_state_dict(state, src=0)
        return self.policy_version

    def update(self, num_trajectories: int, progress: float = 0.0, discard: bool = False,
               sampling_round: int | None = None, env_ranks: list[int] | None = None) -> dict:
        """Take ``num_trajectories`` trajectories from the channel; once the algorithm has enough
        (``train/needs_more`` is 0) run one update on them at the learning rate for ``progress`` (0 to 1) of the
        run; returns metrics. ``discard``: drop them instead (a sampling round that lost part of a group) and ask
        for more.

        ``sampling_round`` (and ``env_ranks``, the env workers whose trajectories the driver counts in it): take
        only that round's trajectories (of those ranks); ones of earlier rounds, or of a rank that died after
        sending (counted lost by the driver), are dropped and counted (``train/stale_trajectories_dropped``),
        ones of later rounds (sampled while this update runs) are kept for their own update. Never is a round's
        trajectory trained in another round. None: any ``num_trajectories`` trajectories, in arrival order."""
        self._require_onloaded("update")
        start, started_at = time.perf_counter(), time.time()
        chunks = self._shared_trajectories(num_trajectories, sampling_round, env_ranks)
        counted = {"train/stale_trajectories_dropped": self.stale_dropped,
                   "train/env_steps_trained": self.env_steps_trained}
        if discard or not chunks:
            return {"train/needs_more": 1, "train/discarded_trajectories": len(chunks),
                    "time/update_s": time.perf_counter() - start, **counted}
        chunks.sort(key=lambda c: c.env_rank)
        batch = {name: self._tensor(np.concatenate([getattr(c, name) for c in chunks], axis=1))
                 for name in ("actions", "logp", "values", "rewards", "terminated", "truncated", "final_values",
                              "success")}
        batch["obs"] = self._tensor(concat_obs([c.obs for c in chunks], axis=1))
        batch["next_value"] = self._tensor(np.concatenate([c.next_value for c in chunks]))
        if all(c.next_obs is not None for c in chunks):
            batch["next_obs"] = self._tensor(concat_obs([c.next_obs for c in chunks], axis=1))
        selected, metrics = self.algorithm.select(batch)
        metrics["train/transitions"] = int(batch["rewards"].numel())  # decisions taken from the channel [T x B]
        self.pending.append(selected)
        self.pending_env_steps += sum(self._env_steps(c) for c in chunks)
        if not self.algorithm.enough(self.pending, len(self.pending)):
            metrics.update({"train/needs_more": 1, "time/update_s": time.perf_counter() - start, **counted})
            return metrics
        samples, prepared = self.algorithm.prepare(self.pending)
        metrics.update(prepared)
        metrics["train/sampling_rounds"] = len(self.pending)
        self.pending = []
        self.env_steps_trained += self.pending_env_steps
        self.pending_env_steps = 0
        counted["train/env_steps_trained"] = self.env_steps_trained
        if self.needs.replay:
            metrics.update(self.algorithm.train(samples, self.generator, self.algorithm.learning_rate(progress)))
        else:
            self._set_learning_rate(progress)
            metrics.update(self._optimize(samples))
        staleness = self.policy_version - min(int(c.policy_versions.min()) for c in chunks)
        self.policy_version += 1
        metrics.update({"train/needs_more": 0, "train/policy_version": self.policy_version,
                        "train/learning_rate": self.algorithm.learning_rate(progress),
                        "train/policy_staleness": staleness, "time/update_s": time.perf_counter() - start,
                        "time/update_started_at": started_at, "time/update_ended_at": time.time(), **counted})
        return metrics

    def _shared_trajectories(self, count: int, sampling_round: int | None, env_ranks: list[int] | None) -> list:
        """``_take_trajectories`` on rank 0, its result (or its error) handed to every other rank."""
        if not self.engine.distributed:
            return self._take_trajectories(count, sampling_round, env_ranks)
        taken = None
        if self.engine.rank == 0:
            try:
                taken = self._take_trajectories(count, sampling_round, env_ranks)
            except Exception as error:  # the others must not wait for trajectories that will not come
                taken = error
        taken = self.engine.broadcast_object(taken)
        if isinstance(taken, Exception):
            raise taken
        return taken

    def _env_steps(self, chunk: Trajectory) -> int:
        """Env steps of a trajectory: its decisions ``[T x b]`` times the simulator steps of each (action chunks)."""
        per_decision = int(np.prod(chunk.actions.shape[2:])) // max(self.action_dim, 1)
        return int(chunk.rewards.size) * max(per_decision, 1)

    def _take_trajectories(self, count: int, sampling_round: int | None, env_ranks: list[int] | None) -> list:
        """``count`` trajectories for an update (see ``update``), trajectories held from earlier calls first."""
        if sampling_round is None:
            chunks, self.held = self.held[:count], self.held[count:]
        else:
            chunks, held, self.held = [], self.held, []
            for item in held:
                self._sort(item, sampling_round, env_ranks, chunks)
        deadline = time.monotonic() + self.trajectory_timeout_s
        while len(chunks) < count:
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise ChannelTimeout
                # Outside rounds take no more than needed; in rounds, all that came (later rounds are held)
                most = count - len(chunks) if sampling_round is None else 1 << 30
                items = self.channel.get_batch(TRAJECTORIES_KEY, most, timeout=remaining)
            except ChannelTimeout:
                taken = sorted(c.env_rank for c in chunks)
                missing = sorted(set(env_ranks) - set(taken)) if env_ranks is not None else "unknown"
                raise TimeoutError(f"actor {self.address}: {len(chunks)} of {count} trajectories of sampling round "
                                   f"{sampling_round} arrived on key {TRAJECTORIES_KEY!r} within "
                                   f"{self.trajectory_timeout_s:g} s (env ranks missing: {missing})") from None
            for item in items:
                if sampling_round is None:
                    chunks.append(item)
                else:
                    self._sort(item, sampling_round, env_ranks, chunks)
        return chunks

    def _sort(self, item: Trajectory, sampling_round: int, env_ranks: list[int] | None, chunks: list) -> None:
        """Into ``chunks`` (this round, a rank counted in it, not yet taken), ``held`` (a later round), or dropped."""
        produced = item.sampling_round
        if produced is not None and produced > sampling_round:
            self.held.append(item)
        elif (produced == sampling_round and (env_ranks is None or item.env_rank in env_ranks)
              and all(c.env_rank != item.env_rank for c in chunks)):
            chunks.append(item)
        else:
            self.stale_dropped += 1

    def _tensor(self, value):
        """Arrays (and dicts of them) as tensors on the device; string arrays (the instruction) stay numpy."""
        if isinstance(value, dict):
            return {k: self._tensor(v) for k, v in value.items()}
        if isinstance(value, np.ndarray) and value.dtype.kind not in "biufc":
            return value
        if isinstance(value, np.ndarray) and not value.flags.writeable:
            value = value.copy()  # arrays read from shared memory or h5 files may be read-only
        return torch.as_tensor(value).to(self.device)

    def _optimize(self, samples: dict) -> dict:
        """Epochs of shuffled minibatches over ``samples`` (flat ``[N, ...]``), stopped early past target_kl."""
        cfg = self.algorithm.config
        n = len(samples["old_logp"])
        if n == 0:
            return {"train/gradient_steps": 0, "train/stopped_early": 0.0}
        if self.needs.reference:
            samples["ref_logp"] = self._reference_logp(samples)
        minibatch = max(1, n // cfg.num_minibatches)
        if getattr(cfg, "off_policy_correction", "behaviour") == "decoupled":
            samples[PROXIMAL_LOGP] = self._proximal_logp(samples, minibatch)
        sums: dict[str, float] = {}
        updates, stopped_early = 0, False
        for _ in range(cfg.update_epochs):
            order = self.algorithm.minibatch_order(samples, self.generator)
            for start in range(0, n - minibatch + 1, minibatch):
                idx = order[start:start + minibatch].to(self.device)
                rows = select_rows(samples, idx)
                loss, loss_metrics, backward = self._minibatch_loss(rows, len(idx))
                # Checked before every step (as CleanRL does): one epoch of many small minibatches can
                # otherwise carry the policy far past the trust region before an epoch-level check sees it.
                if cfg.target_kl is not None and loss_metrics["approx_kl"] > cfg.target_kl:
                    stopped_early = True
                    break
                self._step(backward)
                updates += 1
                for name, value in loss_metrics.items():
                    sums[name] = sums.get(name, 0.0) + value
            if stopped_early:
                break
        metrics = {f"train/{k}": v / max(updates, 1) for k, v in sums.items()}
        metrics.update({"train/gradient_steps": updates, "train/stopped_early": float(stopped_early)})
        return metrics

    def _set_learning_rate(self, progress: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = self.algorithm.learning_rate(progress) * group["lr_scale"]

    def _minibatch_loss(self, rows: dict, count: int):
        """``(loss, metrics, backward)`` of a minibatch of ``count`` rows, in micro-batches of
        ``micro_batch_size`` rows when set (``workers/micro_batches.py``: the same gradient)."""
        # the scaler's current factor (scale() also starts it on the first step)
        scale = float(self.scaler.scale(torch.ones((), device=self.device))) if self.scaler.is_enabled() else 1.0
        return minibatch_loss(lambda part: self.algorithm.evaluate(self.policy, part), self.algorithm.loss, rows,
                              count, self.micro_batch_size, scale, self.engine)

    def _step(self, backward) -> None:
        """Zero the gradients, ``backward()`` (fills them, scaled under fp16), unscale, clip, step (skipped by the
        scaler when a scaled gradient overflowed, which then lowers its scale)."""
        self.optimizer.zero_grad(set_to_none=True)
        backward()
        self.scaler.unscale_(self.optimizer)
        self.engine.clip_grad_norm_(self.algorithm.config.max_grad_norm)  # sharded: the norm over all ranks
        self.scaler.step(self.optimizer)
        self.scaler.update()

    @torch.no_grad()
    def _proximal_logp(self, samples: dict, chunk: int) -> torch.Tensor:
        """Decoupled PPO's proximal policy, the weights as this update starts: log-probs of the samples' actions
        ``[n]`` (with token ratios ``[n, M]``), in chunks of ``chunk`` rows."""
        def proximal(rows: dict) -> torch.Tensor:
            outputs = self.algorithm.evaluate(self.policy, rows)
            return outputs.get("token_logp", outputs["logp"])

        return self._per_row(samples, proximal, chunk)

    def _reference_logp(self, samples: dict) -> torch.Tensor:
        """Log-probs ``[n]`` of the samples' actions under the reference policy."""
        if self.reference is None:  # the policy as it was before its first RL update (e.g. the SFT result)
            self.reference = self.engine.frozen_copy()
        return self._per_row(samples, lambda rows: self.reference.evaluate(rows["obs"], rows["actions"])[0])

    @torch.no_grad()
    def _per_row(self, samples: dict, outputs, chunk: int | None = None) -> torch.Tensor:
        """``outputs(rows) -> [n, ...]`` of every sample, without gradients, in passes of at most ``chunk`` rows;
        sharded, each rank computes its slice (the same number of passes on every rank) and they are gathered."""
        n = len(samples["old_logp"])
        counts = self.engine.row_counts(n)
        parts = []
        for part in rank_passes(n, counts, self.engine.rank, chunk):
            rows = select_rows(samples, part if part.stop > part.start else slice(0, 1))  # an empty pass: 1 row
            parts.append(outputs(rows)[:part.stop - part.start].detach())
        return self.engine.all_gather_rows(torch.cat(parts), counts)

    def load_demo_transitions(self, arrays: dict) -> int:
        """Demonstration transitions for an off-policy learner that mixes them into its batches (RLPD): arrays of
        ``replay.TRANSITION_KEYS``; a policy not yet trained or loaded normalises its observations by theirs.
        Returns their number."""
        if not self.weights_loaded and hasattr(self.policy, "set_observation_normalization"):
            self.policy.set_observation_normalization(arrays["obs"])
        return self.algorithm.add_demonstrations({k: self._tensor(v) for k, v in arrays.items()})

    # --- supervised fine-tuning -----------------------------------------------------------------------------
    def load_demonstrations(self, arrays: dict) -> int:
        """Keep demonstration arrays for ``sft_update``: obs ``[N, ...]`` (array or dict), actions ``[N, A]`` (or
        action chunks ``[N, K, A]``); a policy that normalises its observations or actions (a VLA's q01/q99 action
        bins) takes their statistics; returns N."""
        if hasattr(self.policy, "set_observation_normalization"):
            self.policy.set_observation_normalization(arrays["obs"])
        if hasattr(self.policy, "set_action_statistics"):
            self.policy.set_action_statistics(arrays["actions"])
        self.demonstrations = {"obs": self._tensor(arrays["obs"]), "actions": self._tensor(arrays["actions"])}
        return len(self.demonstrations["actions"])

    def sft_update(self, gradient_steps: int) -> dict:
        """``gradient_steps`` steps of the SFT algorithm on random minibatches of the demonstrations."""
        self._require_onloaded("update")
        if self.demonstrations is None:
            raise RuntimeError(f"actor worker {self.address} has no demonstrations; call load_demonstrations first")
        start = time.perf_counter()
        n = len(self.demonstrations["actions"])
        batch_size = min(self.algorithm.config.batch_size, n)
        sums: dict[str, float] = {}
        for _ in range(gradient_steps):
            self._set_learning_rate(self.supervised_steps / self.algorithm.config.gradient_steps)
            self.supervised_steps += 1
            idx = torch.randint(n, (batch_size,), generator=self.generator).to(self.device)
            rows = select_rows(self.demonstrations, idx)
            loss, loss_metrics, backward = self._minibatch_loss(rows, batch_size)
            self._step(backward)
            for name, value in loss_metrics.items():
                sums[name] = sums.get(name, 0.0) + value
        self.policy_version += 1
        metrics = {f"train/{k}": v / gradient_steps for k, v in sums.items()}
        metrics.update({"train/gradient_steps": gradient_steps, "train/policy_version": self.policy_version,
                        "train/learning_rate": self.optimizer.param_groups[0]["lr"],
                        "time/update_s": time.perf_counter() - start})
        return metrics

    # --- checkpointing --------------------------------------------------------------------------------------
    def training_state(self) -> dict | None:
        """Everything needed to resume: weights, optimizer, RNG states, version, the algorithm's counters and the
        frozen reference policy of a KL term (the policy as the run started, not as it resumes). Sharded: gathered
        from every rank (the optimizer state keyed by parameter name); rank 0 returns it, the others None."""
        if self.engine.distributed:
            optimizer = self.engine.optimizer_state_dict(self.optimizer)
            reference = None if self.reference is None else self.engine.full_state_dict(self.reference)
            weights = self.get_weights()
            if weights is None:
                return None
        else:
            optimizer, weights = self.optimizer.state_dict(), self.get_weights()
            reference = None if self.reference is None else self.reference.state_dict()
        buffer = io.BytesIO()
        state = {"optimizer": optimizer, "torch_rng": torch.get_rng_state(),
                 "shuffle_rng": self.generator.get_state(), "policy_version": self.policy_version,
                 "supervised_steps": self.supervised_steps, "algorithm": self.algorithm.state_dict(),
                 "env_steps_trained": self.env_steps_trained, "grad_scaler": self.scaler.state_dict()}
        if reference is not None:
            state["reference"] = {k: v.detach().cpu() for k, v in reference.items()}
        torch.save(state, buffer)
        return {"weights": weights[0], "trainer_state": buffer.getvalue()}

    def load_training_state(self, weights: dict, trainer_state: bytes | None) -> int:
        # Loading replaces optimizer state, which onload could then not find: load only while onloaded.
        self._require_onloaded("load training state")
        if self.engine.distributed:  # every entry, each in the dtype this policy keeps it in
            live = self.policy.state_dict()
            self.engine.load_full_state_dict({k: as_tensor(weights[k]).to(self.device, live[k].dtype) for k in live})
        else:
            load_host_weights(self.policy, weights)
        self.weights_loaded = True
        if self.needs.replay:
            self.algorithm.reset_targets()  # a trainer state below brings its own
        if trainer_state is not None:
            # On the host first: a checkpoint written on a GPU resumes on a CPU-only machine (and vice versa).
            state = read_trainer_state(trainer_state)
            if self.engine.distributed:
                self.engine.load_optimizer_state_dict(self.optimizer, state["optimizer"])
            else:
                self.optimizer.load_state_dict(renumbered_optimizer_state(state["optimizer"], self.policy,
                                                                          self.optimizer.param_groups))
            torch.set_rng_state(state["torch_rng"])
            self.generator.set_state(state["shuffle_rng"])
            self.policy_version = state["policy_version"]
            self.supervised_steps = state.get("supervised_steps", 0)
            self.env_steps_trained = int(state.get("env_steps_trained", 0))
            if state.get("grad_scaler"):
                self.scaler.load_state_dict(state["grad_scaler"])
            self.algorithm.load_state_dict(state.get("algorithm", {}))
            if "reference" in state:
                self.reference = self.engine.frozen_copy()
                self.engine.load_full_state_dict({k: v.to(self.device) for k, v in state["reference"].items()},
                                                 self.reference)
        return self.policy_version
