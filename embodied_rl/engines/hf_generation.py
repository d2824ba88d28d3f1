"""Generation with Hugging Face ``generate`` (KV cache) on a ``transformers`` causal LM.

Memory: ``generate`` keeps no per-step scores (``output_scores`` would keep a float32 ``[B, V]`` tensor per new
token: 300 GB for 1,024 answers of 512 tokens over Qwen's 152k vocabulary). The sampler's own warpers (temperature,
top-p) run here as the last processors, and ``ChosenTokenLogprobs`` after them keeps one step's log-softmax until
the next step shows which token was drawn from it: one ``[B, V]`` float32 tensor at a time."""

from __future__ import annotations

import torch

from embodied_rl.engines.generation import Generation, SamplingParams


class ChosenTokenLogprobs:
    """A logits processor (last in the list) recording each generated token's log-prob under the distribution it
    was sampled from: at step t it keeps ``log_softmax(scores_t)`` ``[B, V]``; at step t + 1 the last column of
    ``input_ids`` is the token drawn at t, whose log-prob is kept (``[B]``) and the ``[B, V]`` tensor dropped."""

    def __init__(self):
        self.pending: torch.Tensor | None = None
        self.chosen: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._take(input_ids[:, -1])
        self.pending = torch.log_softmax(scores.float(), -1)
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        if self.pending is not None:
            self.chosen.append(self.pending.gather(-1, tokens[:, None]).squeeze(-1))
            self.pending = None

    def finish(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[B, T]`` log-probs of the generated ``tokens`` ``[B, T]`` (the last step's from its kept scores)."""
        self._take(tokens[:, -1])
        if len(self.chosen) != tokens.shape[1]:
            raise RuntimeError(f"recorded {len(self.chosen)} steps for {tokens.shape[1]} generated tokens")
        return torch.stack(self.chosen, 1) if self.chosen else tokens.new_zeros(tokens.shape, dtype=torch.float)


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
        from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

        greedy = params.temperature == 0
        recorder = ChosenTokenLogprobs()
        processors = []
        if not greedy and params.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(params.temperature))
        if not greedy and params.top_p < 1.0:
            processors.append(TopPLogitsWarper(params.top_p))
        # generate's own warpers are off (temperature 1, top-k 0, top-p 1): ours run, then the recorder, last
        options = dict(max_new_tokens=params.max_new_tokens, do_sample=not greedy, pad_token_id=self.pad_id,
                       eos_token_id=self.eos_id, logits_processor=LogitsProcessorList([*processors, recorder]))
        if not greedy:
            options.update(temperature=1.0, top_p=1.0, top_k=0)
        with torch.random.fork_rng(devices=[], enabled=params.seed is not None):
            if params.seed is not None:
                torch.manual_seed(params.seed)
            sequences = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                            **options)
        tokens = sequences[:, width:]  # [B, T]
        chosen = recorder.finish(tokens).cpu()  # [B, T]
        tokens = tokens.cpu()
        results = []
        for row in range(len(prompts)):
            ended = (tokens[row] == self.eos_id).nonzero()
            length = int(ended[0]) + 1 if len(ended) else tokens.shape[1]
            results.append(Generation(tokens[row, :length].tolist(), chosen[row, :length].tolist(), bool(len(ended))))
        return results

    def release_memory(self) -> None:
        """Nothing of its own: the generation worker's offloader moves the model itself."""

    def resume_memory(self) -> None:
        """Nothing of its own (see ``release_memory``)."""

    def load_weights(self, state_dict: dict) -> None:
        tensors = {k: torch.as_tensor(v) for k, v in state_dict.items()}
        unexpected = self.model.load_state_dict(tensors, strict=False).unexpected_keys
        if unexpected:  # a subset (only the trained weights) is fine; a name the model lacks is a mismatch
            raise KeyError(f"weights the model does not have: {', '.join(unexpected[:5])}")
