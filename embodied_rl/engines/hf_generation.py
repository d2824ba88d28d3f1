"""Generation with Hugging Face ``generate`` (KV cache) on a ``transformers`` causal LM."""

from __future__ import annotations

import torch

from embodied_rl.engines.generation import Generation, SamplingParams


class HFGenerationEngine:
    """Batched sampling from ``model`` (left-padded prompts); log-probs from the scores ``generate`` sampled from.

    The distribution is the ``SamplingParams`` alone: the checkpoint's own ``generation_config.json`` (a repetition
    penalty, top-k, a minimum length, ...) is replaced by a neutral one, since the trainer scores responses under
    the plain softmax at the sampling temperature and any other processor would make the two disagree."""

    def __init__(self, model, pad_id: int, eos_id: int):
        from transformers import GenerationConfig

        self.model = model.eval()
        self.pad_id, self.eos_id = pad_id, eos_id
        self.model.generation_config = GenerationConfig(pad_token_id=pad_id, eos_token_id=eos_id, top_k=None,
                                                        top_p=None, temperature=None, do_sample=False)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt):] = torch.tensor(prompt)
            mask[row, width - len(prompt):] = 1
        greedy = params.temperature == 0
        options = dict(max_new_tokens=params.max_new_tokens, do_sample=not greedy, pad_token_id=self.pad_id,
                       eos_token_id=self.eos_id, output_scores=True, return_dict_in_generate=True)
        if not greedy:
            options.update(temperature=params.temperature, top_p=params.top_p, top_k=0)
        with torch.random.fork_rng(devices=[], enabled=params.seed is not None):
            if params.seed is not None:
                torch.manual_seed(params.seed)
            out = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **options)
        tokens = out.sequences[:, width:]  # [B, T]
        # One step at a time: the chosen token's log-prob [B] per step, never a [B, T, V] tensor (150k-token vocab)
        chosen = torch.stack([torch.log_softmax(s.float(), -1).gather(-1, tokens[:, t, None]).squeeze(-1)
                              for t, s in enumerate(out.scores)], 1).cpu()  # [B, T]
        tokens = tokens.cpu()
        results = []
        for row in range(len(prompts)):
            ended = (tokens[row] == self.eos_id).nonzero()
            length = int(ended[0]) + 1 if len(ended) else tokens.shape[1]
            results.append(Generation(tokens[row, :length].tolist(), chosen[row, :length].tolist(), bool(len(ended))))
        return results

    def load_weights(self, state_dict: dict) -> None:
        tensors = {k: torch.as_tensor(v) for k, v in state_dict.items()}
        unexpected = self.model.load_state_dict(tensors, strict=False).unexpected_keys
        if unexpected:  # a subset (only the trained weights) is fine; a name the model lacks is a mismatch
            raise KeyError(f"weights the model does not have: {', '.join(unexpected[:5])}")
