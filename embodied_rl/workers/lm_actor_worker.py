"""LM actor worker: trains the causal LM, by SFT on (question, answer) pairs (or on token ids with a loss mask: a
multi-turn demonstration) and by an algorithm of the GRPO family (``embodied_rl/algorithms/text_rl.py``) on scored
responses.

Data parallel (``data_parallel={backend: ddp|fsdp, master_address, master_port}``, plus ``rank`` and ``world_size``
when they are not this worker's own in its group): N such workers form one trainer. Every rank is given the same
full batch, at the same time; each draws the same minibatch rows (same seed, checked), trains on its contiguous
slice of each minibatch with the loss scaled so that the averaged gradient is the single-process gradient
(``engines/training/data_parallel.py``), and rank 0 returns the metrics of the whole batch and the whole model.
With ``backend: megatron`` the N workers are instead Megatron ranks: ``tensor_parallel_size`` ranks hold one copy
of the model split by tensor parallelism and train on the same slice, N / ``tensor_parallel_size`` copies split
each minibatch as data-parallel ranks do (``engines/training/megatron_engine.py``).

Memory (``memory={micro_batch_size, max_tokens_per_micro_batch, activation_checkpointing, reference_offload}``, the
``actor.*`` keys): every pass over rows (the trainer's minibatch slices, the old and reference log-probs) runs in
micro-batches with the gradient accumulated exactly (``engines/training/micro_batches.py``); the decoder layers can
be recomputed in the backward pass; the KL reference is the cheapest of ``workers/lm_reference.py``'s forms.
``sft_update``,
``sft_update_ids``, ``rl_update``, ``rl_update_round`` (sampled rounds read from a channel: ``workers/text_rounds.py``),
``get_weights``, ``training_state`` and ``save_pretrained`` are collective: call
them on every rank concurrently, in the same order."""

from __future__ import annotations

import io
import time

import numpy as np
import torch

from embodied_rl.algorithms import text_rl
from embodied_rl.engines.training import DataParallelConfig, DataParallelEngine
from embodied_rl.engines.training.micro_batches import accumulation_weight, micro_batches, pad_passes
from embodied_rl.models.causal_lm.chat import answer_ids, build_lm, padding_id, prompt_ids
from embodied_rl.models.causal_lm.logprobs import response_logprobs
from embodied_rl.models.causal_lm.lora import add_lora, merged_state_dict
from embodied_rl.runtime import Worker
from embodied_rl.runtime.offload import MoveReport, Offloader
from embodied_rl.workers.lm_reference import KLReference
from embodied_rl.workers.lm_rows import aggregation_denominator, enable_activation_checkpointing, token_mask, \
    trained_tokens
from embodied_rl.workers.messages import POLICY_VERSION_KEY
from embodied_rl.workers.text_rounds import RoundTrainer
from embodied_rl.workers.weights import as_tensor, host_weights


class LMActorWorker(RoundTrainer, Worker):
    def __init__(self, model: dict, algorithm: text_rl.TextRLConfig, seed: int = 0,
                 data_parallel: dict | None = None, lora: dict | None = None, memory: dict | None = None,
                 channel=None, round_timeout_s: float = 600.0, **kwargs):
        super().__init__(**kwargs)
        torch.manual_seed(seed)
        memory = dict(memory or {})
        self.micro_batch_size = memory.get("micro_batch_size")
        self.max_tokens_per_micro_batch = memory.get("max_tokens_per_micro_batch")
        self.model, self.tokenizer = build_lm(model["name"], model.get("seed", 0))
        if memory.get("activation_checkpointing"):
            enable_activation_checkpointing(self.model)
        self.prompt = dict(prompt_format=model.get("prompt_format", "chat"),
                           template=model.get("prompt_template", "{question}"))
        # Mixed precision: a bf16 checkpoint trains on float32 master weights, its forward under autocast to bf16.
        # With LoRA the frozen base stays in the checkpoint's dtype and only the adapters are float32.
        self.compute_dtype = self.model.dtype
        self.lora = bool(lora and lora.get("rank"))
        if self.lora:
            add_lora(self.model, int(lora["rank"]), float(lora.get("alpha") or 0.0))
            self.model.to(device=self.device).train()
        else:
            self.model.to(device=self.device, dtype=torch.float32).train()
        parallel = {"rank": self.rank, "world_size": self.world_size, **data_parallel} if data_parallel else {}
        self.mixed_precision = self.compute_dtype != torch.float32 and parallel.get("backend") != "megatron"
        if parallel.get("backend") == "megatron":  # tensor parallel: self.model becomes this rank's Megatron slice
            from embodied_rl.engines.training.megatron_engine import MegatronLlamaEngine

            del parallel["backend"]
            self.engine = MegatronLlamaEngine(self.model, device=self.device, compute_dtype=self.compute_dtype,
                                              **parallel)
            self.model = self.engine.model
        else:
            self.engine = DataParallelEngine(self.model, DataParallelConfig(**parallel), self.device)
        self.engine.check_same(seed, "the actor's seed")  # the minibatch rows are drawn alike on every rank
        self.algorithm = algorithm
        self.optimizer = torch.optim.AdamW(self.engine.optimized_parameters(), lr=1e-3, weight_decay=0.0)
        self.generator = torch.Generator().manual_seed(seed + 1000)
        self.reference = KLReference(self.engine, self.model, self.compute_dtype, self.device, self.lora,
                                     bool(memory.get("reference_offload")))
        self.policy_version = 0
        self.pad_id = padding_id(self.tokenizer)
        # Between its turns on a device shared with generation: the model, its gradients and AdamW's state go to
        # host memory (the KL reference, made at the first update that needs it, stays where it is).
        self.offloader = Offloader([self.model], [self.optimizer])
        if channel is not None:  # sampled rounds come on the channel (``rl_update_round``)
            self.open_rounds(channel, round_timeout_s)

    def offload(self) -> MoveReport:
        """Give the device up (see ``runtime/offload.py``); a no-op move on a CPU-only machine."""
        return self.offloader.offload()

    def onload(self) -> MoveReport:
        return self.offloader.onload()

    def get_weights(self, only_trained: bool = False) -> tuple[dict, int] | None:
        """``({name: tensor}, policy_version)`` for the generation workers (``WeightSync``'s object-store path):
        the whole model as host tensors in the dtype they hold it in (the checkpoint's: half the float32 masters'
        bytes for a bf16 model), rank 0; None on the other data-parallel ranks. ``only_trained`` is taken for
        ``WeightSync``'s one interface: every weight of the LM is sent."""
        weights = self._master_weights()
        if weights is None:
            return None
        return {name: value.to(self.compute_dtype) if value.is_floating_point() else value
                for name, value in weights.items()}, self.policy_version

    def _master_weights(self) -> dict | None:
        """The whole model as host tensors of their own dtype (the float32 masters; LoRA merged), rank 0."""
        if not self.engine.distributed:
            return host_weights(state=self._sent_state(self.model.state_dict()))
        state = self.engine.full_state_dict()
        return None if state is None else host_weights(state=self._sent_state(state))

    def _sent_state(self, state: dict) -> dict:
        """What generation workers and saved models get: with LoRA the merged weights under the plain names."""
        return merged_state_dict(self.model) if self.lora else state

    def broadcast_weights(self, collective: str, only_trained: bool = False) -> int | None:
        """Send the whole model and the policy version to every other rank of ``collective``, of which rank 0 of
        the trainer is rank 0 (and the only trainer member). Collective over the trainer: every rank takes part in
        gathering the full state dict; rank 0 returns the version, the others None."""
        state = self.engine.full_state_dict() if self.engine.distributed else self.model.state_dict()
        if state is None:
            return None
        state = self._sent_state(state)
        # in the dtype the generation workers hold the model in (the checkpoint's): half the bytes of the masters
        state = {name: value.detach().to(self.compute_dtype) if value.is_floating_point() else value.detach()
                 for name, value in state.items()}
        state[POLICY_VERSION_KEY] = torch.tensor(self.policy_version, dtype=torch.int64)
        self.collectives[collective].broadcast_state_dict(state, src=0)
        return self.policy_version

    def _logprobs(self, model, prompts: list[list[int]], responses: list[list[int]], temperature: float = 1.0):
        """``response_logprobs`` (``[B, L]`` log-probs and mask) with the forward in the checkpoint's dtype:
        autocast over the float32 master weights (none for a float32 model, or under Megatron, whose bf16 model runs
        in bf16 over its own float32 masters)."""
        with torch.autocast(device_type=self.device.type, dtype=self.compute_dtype, enabled=self.mixed_precision):
            return response_logprobs(model, prompts, responses, self.pad_id, temperature)

    def _passes(self, rows: list[int], tokens: list[int]) -> list[list[int]]:
        """``rows`` (``tokens[i]``: row ``rows[i]``'s prompt + response tokens) cut into micro-batches by
        ``micro_batch_size`` and ``max_tokens_per_micro_batch``, padded with empty passes to the largest count over
        the ranks (under FSDP and Megatron every forward is collective)."""
        passes = micro_batches(rows, tokens, self.micro_batch_size, self.max_tokens_per_micro_batch)
        if self.engine.distributed and self.engine.world_size > 1:
            counts = [0.0] * self.engine.world_size
            counts[self.engine.rank] = float(len(passes))
            passes = pad_passes(passes, int(max(self.engine.all_reduce_sum(counts))))
        return passes

    def _logprobs_in_passes(self, model, prompts: list[list[int]], responses: list[list[int]],
                            temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        """``_logprobs`` (no gradients) over all rows, computed micro-batch by micro-batch: ``[N, L]`` log-probs and
        mask, L the longest response."""
        width = max((len(r) for r in responses), default=0)
        logp = torch.zeros(len(responses), width, device=self.device)
        mask = torch.zeros(len(responses), width, device=self.device)
        tokens = [len(p) + len(r) for p, r in zip(prompts, responses)]
        for rows in self._passes(list(range(len(responses))), tokens):
            # an empty pass (another rank has more) still runs the collective forward (FSDP, Megatron), unused
            idx = rows or [0]
            part, part_mask = self._logprobs(model, [prompts[i] for i in idx], [responses[i] for i in idx],
                                             temperature)
            if rows:
                logp[rows, :part.shape[1]] = part.float()
                mask[rows, :part.shape[1]] = part_mask
        return logp, mask

    def _apply(self, lr: float, max_grad_norm: float) -> float:
        """Clip the accumulated gradients and take the optimizer step; the norm before clipping."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        norm = self.engine.clip_grad_norm_(max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.engine.after_step()
        return norm

    def _local_rows(self, rows: list[int], denominator) -> tuple[list[int], float | None]:
        """This rank's slice of minibatch ``rows`` and the factor on its loss (None: one process, no factor), from
        ``denominator(rows)``, the loss aggregation's denominator over some rows. May be empty."""
        if not self.engine.distributed:
            return rows, None
        local = self.engine.shard(rows)
        return local, self.engine.loss_scale(denominator(local), denominator(rows)) if local else 0.0

    def sft_update(self, examples: list[tuple[str, str]], steps: int, batch_size: int, lr: float) -> dict:
        """``steps`` steps of next-token cross-entropy on the answers (the prompts are not trained on)."""
        encoded = [dict(prompt_ids=prompt_ids(self.tokenizer, q, **self.prompt),
                        token_ids=answer_ids(self.tokenizer, a)) for q, a in examples]
        return self.sft_update_ids(encoded, steps, batch_size, lr)

    def sft_update_ids(self, examples: list[dict], steps: int, batch_size: int, lr: float) -> dict:
        """``steps`` steps of next-token cross-entropy (mean over the trained tokens of each minibatch) on examples
        given as ids: ``prompt_ids`` (not trained on), ``token_ids`` and optionally ``loss_mask`` (one 0/1 per
        token; absent: all 1), e.g. a multi-turn demonstration whose env turns are not the model's to learn.
        ``sft/trained_tokens`` and ``sft/response_tokens``: over every example, once."""
        start = time.perf_counter()
        lengths = torch.tensor([len(e["token_ids"]) for e in examples])
        masks = [e.get("loss_mask") or [1] * len(e["token_ids"]) for e in examples]
        counts = trained_tokens(masks, lengths).tolist()
        pool = [i for i, count in enumerate(counts) if count]  # the examples with a token to train on
        if not pool:
            raise ValueError("sft_update_ids: no example has a token to train on (every loss_mask is 0)")
        losses = []
        for _ in range(steps):
            rows_drawn = [pool[j] for j in torch.randint(len(pool), (min(batch_size, len(pool)),),
                                                         generator=self.generator).tolist()]
            rows, scale = self._local_rows(rows_drawn, lambda idx: sum(counts[i] for i in idx))
            local_total = sum(counts[i] for i in rows)
            loss_sum = 0.0
            for part in self._passes(rows, [len(examples[i]["prompt_ids"]) + int(lengths[i]) for i in rows]):
                # an empty pass still runs the collective forward and backward, at weight 0
                idx = part or rows_drawn[:1]
                weight = accumulation_weight(sum(counts[i] for i in part), local_total, 1.0 if scale is None else
                                             scale)
                logp, mask = self._logprobs(self.engine.module, [examples[i]["prompt_ids"] for i in idx],
                                            [examples[i]["token_ids"] for i in idx])
                mask = mask * token_mask([masks[i] for i in idx], mask.shape[1]).to(mask.device)
                loss = -(logp * mask).sum() / mask.sum() * weight
                loss.backward()
                loss_sum += loss.item()
            self._apply(lr, 1.0)
            # Data parallel: the ranks' scaled losses sum, divided by world_size, to the whole minibatch's loss.
            losses.append(loss_sum if scale is None else loss_sum / self.engine.world_size)
        if self.engine.distributed:
            losses = self.engine.all_reduce_sum(losses)
        self.policy_version += 1
        return {"sft/loss": sum(losses[-10:]) / len(losses[-10:]), "sft/first_loss": losses[0], "sft/steps": steps,
                "sft/trained_tokens": sum(counts), "sft/response_tokens": int(lengths.sum()),
                "time/sft_s": time.perf_counter() - start}

    def rl_update(self, batch: dict, lr: float, temperature: float, update_rounds: int = 1,
                  num_minibatches: int = 1, max_grad_norm: float = 1.0) -> dict:
        """One update on a group-contiguous batch: ``prompt_ids`` and ``token_ids`` (lists of N id lists),
        ``logprobs`` (the engine's, N lists), ``scores`` ``[N]``, optionally ``loss_mask`` (N lists of 0/1, one per
        response token; absent: all 1): tokens at 0 (e.g. tool results the environment inserted into a multi-turn
        response) are neither trained on nor counted in the rollout/trainer log-prob difference."""
        start = time.perf_counter()
        config = self.algorithm
        lengths = torch.tensor([len(t) for t in batch["token_ids"]])
        adv, keep, metrics = text_rl.advantages(torch.tensor(np.asarray(batch["scores"])), lengths, config)
        loss_mask = batch.get("loss_mask")
        trained = lengths if loss_mask is None else trained_tokens(loss_mask, lengths)
        rows = [i for i in range(len(lengths)) if keep[i] and trained[i] > 0]
        metrics.update({"train/response_length": lengths.float().mean().item(), "train/trained_responses": len(rows),
                        "train/response_tokens": int(lengths.sum()),
                        "train/trained_tokens": int(sum(int(trained[i]) for i in rows))})
        if not rows:
            return {**metrics, "train/gradient_steps": 0, "time/update_s": time.perf_counter() - start}
        prompts = [batch["prompt_ids"][i] for i in rows]
        responses = [batch["token_ids"][i] for i in rows]
        adv = adv[rows].to(self.device)
        width = max(len(r) for r in responses)
        rollout = torch.zeros(len(rows), width, device=self.device)
        for j, i in enumerate(rows):
            rollout[j, :len(batch["logprobs"][i])] = torch.tensor(batch["logprobs"][i])
        # Every rank draws the same minibatches of rows and takes its slice of each; the old (and reference)
        # log-probs are those of the rows its slices hold (one process: all rows), before any step.
        agg = config.setting("loss_agg")
        counts = [int(trained[i]) for i in rows]

        def denominator(idx: list[int]) -> float:
            return aggregation_denominator(agg, [counts[i] for i in idx], [len(responses[i]) for i in idx])

        plan = [[self._local_rows(part.tolist(), denominator)
                 for part in torch.chunk(torch.randperm(len(rows), generator=self.generator), num_minibatches)]
                for _ in range(update_rounds)]
        needed = sorted({i for round_plan in plan for idx, _ in round_plan for i in idx} or {0})
        at = {row: j for j, row in enumerate(needed)}
        needed_prompts, needed_responses = [prompts[i] for i in needed], [responses[i] for i in needed]
        with torch.no_grad():
            old, mask = self._logprobs_in_passes(self.model, needed_prompts, needed_responses, temperature)
            if loss_mask is not None:
                mask = mask * token_mask([loss_mask[rows[i]] for i in needed], mask.shape[1]).to(mask.device)
            ref = None
            if config.kl_coef > 0:
                if not self.reference.captured:  # the model as RL starts (the SFT result)
                    self.reference.capture()
                with self.reference.module() as reference:
                    ref, _ = self._logprobs_in_passes(reference, needed_prompts, needed_responses, temperature)
        sums: dict = {}
        steps = weight_total = 0
        loss_total = norm_total = 0.0
        tokens = [len(p) + len(r) for p, r in zip(prompts, responses)]
        for round_plan in plan:
            for local, scale in round_plan:
                local_total = denominator(local)
                for part in self._passes(local, [tokens[i] for i in local]):
                    # an empty pass still runs the collective forward and backward, at weight 0
                    idx = part or [needed[0]]
                    weight = accumulation_weight(denominator(part), local_total, 1.0 if scale is None else scale)
                    logp, _ = self._logprobs(self.engine.module, [prompts[i] for i in idx],
                                             [responses[i] for i in idx], temperature)
                    sel, w = [at[i] for i in idx], logp.shape[1]
                    loss, loss_metrics = text_rl.loss(logp, old[sel][:, :w], mask[sel][:, :w], adv[idx], config,
                                                      ref[sel][:, :w] if ref is not None else None,
                                                      rollout[idx][:, :w])
                    loss = loss * weight
                    loss.backward()
                    # the passes' weighted losses add up to the slice's (scaled) loss; the rest weighted by rows
                    loss_total += loss.item() / (self.engine.world_size if scale is not None else 1)
                    for k, v in loss_metrics.items():
                        sums[k] = sums.get(k, 0.0) + v * len(part)
                    weight_total += len(part)
                norm_total += self._apply(lr, max_grad_norm)
                steps += 1
        self.policy_version += 1
        if not self.engine.distributed:
            diff = (((old - rollout).abs() * mask).sum() / mask.sum()).item()
        else:
            # The first round's slices partition the rows across ranks: the difference over each row once.
            own_rows = [i for local, _ in plan[0] for i in local]
            own = [at[i] for i in own_rows]
            gap = ((old[own] - rollout[own_rows][:, :old.shape[1]]).abs() * mask[own]).sum().item()
            keys = sorted(sums)
            *totals, weight_total, gap, token_count, loss_total = self.engine.all_reduce_sum(
                [sums[k] for k in keys] + [weight_total, gap, mask[own].sum().item(), loss_total])
            sums = dict(zip(keys, totals))
            diff = gap / token_count
        metrics.update({f"train/{k}": v / weight_total for k, v in sums.items()})
        metrics.update({"train/loss": loss_total / steps, "train/grad_norm": norm_total / steps})
        metrics.update({"train/gradient_steps": steps, "train/policy_version": self.policy_version,
                        "train/rollout_trainer_logp_diff": diff, "time/update_s": time.perf_counter() - start})
        return metrics

    def _training_state_parts(self) -> tuple[dict, dict] | None:
        """``(weights, trainer state dict)`` of the whole trainer (rank 0; None on the other ranks; collective)."""
        optimizer = self.engine.optimizer_state_dict(self.optimizer) if self.engine.distributed else \
            self.optimizer.state_dict()
        # the KL reference, once RL made it (a resumed run must not take the resumed weights)
        reference = self.reference.state()
        if self.lora:  # the adapters beside the frozen base, as trained (the merged weights would not resume)
            weights = host_weights(self.model)  # LoRA runs have one trainer process
        else:
            weights = self._master_weights()
        if weights is None:
            return None
        return weights, {"optimizer": optimizer, "torch_rng": torch.get_rng_state(), "reference": reference,
                            "shuffle_rng": self.generator.get_state(), "policy_version": self.policy_version}

    def training_state(self) -> dict | None:
        """``{"weights", "trainer_state"}`` of the whole trainer (rank 0; None on the other data-parallel ranks).
        Under FSDP the optimizer state is keyed by parameter name (``engine.optimizer_state_dict``)."""
        parts = self._training_state_parts()
        if parts is None:
            return None
        buffer = io.BytesIO()
        torch.save(parts[1], buffer)
        return {"weights": parts[0], "trainer_state": buffer.getvalue()}

    def write_training_state(self, directory: str) -> bool | None:
        """``training_state()`` written by rank 0 straight into ``directory`` (a checkpoint's staging directory on
        a file system this process shares with the driver), so the state never passes through Ray or the driver's
        memory: True on rank 0, None elsewhere (collective)."""
        from embodied_rl.utils.checkpoint import write_trainer_files

        parts = self._training_state_parts()
        if parts is None:
            return None
        write_trainer_files(directory, *parts)
        return True

    def node_address(self) -> str:
        """This process's node address (the driver writes checkpoints through it where it is its own)."""
        import ray

        return ray.util.get_node_ip_address()

    def load_training_state(self, weights: dict, trainer_state: bytes) -> int:
        """On every rank, the same ``training_state()`` of a run with this backend: weights, optimizer moments, the
        KL reference, the RNGs and the policy version, so training goes on as if never stopped; the version."""
        state = torch.load(io.BytesIO(trainer_state), map_location="cpu", weights_only=True)
        tensors = {name: as_tensor(value).to(self.device) for name, value in weights.items()}
        self.engine.load_full_state_dict(tensors)
        self.engine.load_optimizer_state_dict(self.optimizer, state["optimizer"])
        self.reference.load(state.get("reference"))
        torch.set_rng_state(state["torch_rng"])
        self.generator.set_state(state["shuffle_rng"])
        self.policy_version = int(state["policy_version"])
        return self.policy_version

    def save_pretrained(self, directory: str) -> str | None:
        """The model and tokenizer in the Hugging Face layout (loadable as ``model.name=<directory>``), written by
        rank 0 (the others return None)."""
        from embodied_rl.models.causal_lm.loading import save_causal_lm

        model = self.engine.full_module() if self.engine.distributed else self.model
        if model is None:
            return None
        state = merged_state_dict(model) if self.lora else None
        return str(save_causal_lm(model, self.tokenizer, directory, self.compute_dtype, state))
