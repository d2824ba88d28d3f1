"""LM actor worker: trains the causal LM, by SFT on (question, answer) pairs and by an algorithm of the GRPO family
(``embodied_rl/algorithms/text_rl.py``) on scored responses."""

from __future__ import annotations

import copy
import io
import time

import numpy as np
import torch

from embodied_rl.algorithms import text_rl
from embodied_rl.models.causal_lm.chat import answer_ids, build_lm, prompt_ids
from embodied_rl.models.causal_lm.logprobs import response_logprobs
from embodied_rl.runtime import Worker
from embodied_rl.workers.weights import weights_to_numpy


class LMActorWorker(Worker):
    def __init__(self, model: dict, algorithm: text_rl.TextRLConfig, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        torch.manual_seed(seed)
        self.model, self.tokenizer = build_lm(model["name"], model.get("seed", 0))
        self.model.to(self.device).train()
        self.algorithm = algorithm
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.0)
        self.generator = torch.Generator().manual_seed(seed + 1000)
        self.reference = None
        self.policy_version = 0
        self.pad_id = self.tokenizer.pad_token_id

    def get_weights(self) -> tuple[dict, int]:
        return weights_to_numpy(self.model), self.policy_version

    def _step(self, loss: torch.Tensor, lr: float, max_grad_norm: float) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_grad_norm)
        self.optimizer.step()
        return float(norm)

    def sft_update(self, examples: list[tuple[str, str]], steps: int, batch_size: int, lr: float) -> dict:
        """``steps`` steps of next-token cross-entropy on the answers (the prompts are not trained on)."""
        start = time.perf_counter()
        encoded = [(prompt_ids(self.tokenizer, q), answer_ids(self.tokenizer, a)) for q, a in examples]
        losses = []
        for _ in range(steps):
            rows = torch.randint(len(encoded), (min(batch_size, len(encoded)),), generator=self.generator).tolist()
            logp, mask = response_logprobs(self.model, [encoded[i][0] for i in rows], [encoded[i][1] for i in rows],
                                           self.pad_id)
            loss = -(logp * mask).sum() / mask.sum()
            self._step(loss, lr, 1.0)
            losses.append(loss.item())
        self.policy_version += 1
        return {"sft/loss": sum(losses[-10:]) / len(losses[-10:]), "sft/first_loss": losses[0], "sft/steps": steps,
                "time/sft_s": time.perf_counter() - start}

    def rl_update(self, batch: dict, lr: float, temperature: float, update_rounds: int = 1,
                  num_minibatches: int = 1, max_grad_norm: float = 1.0) -> dict:
        """One update on a group-contiguous batch: ``prompt_ids`` and ``token_ids`` (lists of N id lists),
        ``logprobs`` (the engine's, N lists), ``scores`` ``[N]``."""
        start = time.perf_counter()
        config = self.algorithm
        lengths = torch.tensor([len(t) for t in batch["token_ids"]])
        adv, keep, metrics = text_rl.advantages(torch.tensor(np.asarray(batch["scores"])), lengths, config)
        rows = [i for i in range(len(lengths)) if keep[i] and lengths[i] > 0]
        metrics.update({"train/response_length": lengths.float().mean().item(), "train/trained_responses": len(rows)})
        if not rows:
            return {**metrics, "train/gradient_steps": 0, "time/update_s": time.perf_counter() - start}
        prompts = [batch["prompt_ids"][i] for i in rows]
        responses = [batch["token_ids"][i] for i in rows]
        adv = adv[rows]
        width = max(len(r) for r in responses)
        rollout = torch.zeros(len(rows), width)
        for j, i in enumerate(rows):
            rollout[j, :len(batch["logprobs"][i])] = torch.tensor(batch["logprobs"][i])
        with torch.no_grad():
            old, mask = response_logprobs(self.model, prompts, responses, self.pad_id, temperature)
            ref = None
            if config.kl_coef > 0:
                if self.reference is None:  # the model as RL starts (the SFT result)
                    self.reference = copy.deepcopy(self.model).eval()
                ref, _ = response_logprobs(self.reference, prompts, responses, self.pad_id, temperature)
        sums: dict = {}
        steps = 0
        for _ in range(update_rounds):
            order = torch.randperm(len(rows), generator=self.generator)
            for part in torch.chunk(order, num_minibatches):
                idx = part.tolist()
                logp, _ = response_logprobs(self.model, [prompts[i] for i in idx], [responses[i] for i in idx],
                                            self.pad_id, temperature)
                m = mask[idx][:, :logp.shape[1]]
                loss, loss_metrics = text_rl.loss(logp, old[idx][:, :logp.shape[1]], m, adv[idx], config,
                                                  ref[idx][:, :logp.shape[1]] if ref is not None else None,
                                                  rollout[idx][:, :logp.shape[1]])
                loss_metrics["grad_norm"] = self._step(loss, lr, max_grad_norm)
                loss_metrics["loss"] = loss.item()
                for k, v in loss_metrics.items():
                    sums[k] = sums.get(k, 0.0) + v
                steps += 1
        diff = ((old - rollout).abs() * mask).sum() / mask.sum()
        self.policy_version += 1
        metrics.update({f"train/{k}": v / steps for k, v in sums.items()})
        metrics.update({"train/gradient_steps": steps, "train/policy_version": self.policy_version,
                        "train/rollout_trainer_logp_diff": diff.item(), "time/update_s": time.perf_counter() - start})
        return metrics

    def training_state(self) -> dict:
        buffer = io.BytesIO()
        torch.save({"optimizer": self.optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
                    "shuffle_rng": self.generator.get_state(), "policy_version": self.policy_version}, buffer)
        return {"weights": weights_to_numpy(self.model), "trainer_state": buffer.getvalue()}

    def save_pretrained(self, directory: str) -> str:
        """The model and tokenizer in the Hugging Face layout (loadable as ``model.name=<directory>``)."""
        from embodied_rl.models.causal_lm.loading import save_causal_lm

        return str(save_causal_lm(self.model, self.tokenizer, directory))
