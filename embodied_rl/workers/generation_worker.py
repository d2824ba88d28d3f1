"""Generation worker: an inference copy of the causal LM behind a generation engine; answers batches of questions
with sampled responses and each token's log-prob."""

from __future__ import annotations

from embodied_rl.engines.generation import SamplingParams
from embodied_rl.engines.hf_generation import HFGenerationEngine
from embodied_rl.models.causal_lm.chat import build_lm, prompt_ids
from embodied_rl.runtime import Worker
from embodied_rl.workers.weights import load_numpy_weights


class GenerationWorker(Worker):
    def __init__(self, model: dict, **kwargs):
        super().__init__(**kwargs)
        self.model, self.tokenizer = build_lm(model["name"], model.get("seed", 0))
        self.model.to(self.device)
        self.engine = HFGenerationEngine(self.model, self.tokenizer.pad_token_id, self.tokenizer.eos_token_id)
        self.policy_version = 0

    def load_weights(self, weights_and_version: tuple[dict, int]) -> int:
        state_dict, version = weights_and_version
        load_numpy_weights(self.model, state_dict)
        self.policy_version = version
        return version

    def generate(self, questions: list[str], params: dict) -> list[dict]:
        """For each question: ``prompt_ids``, ``token_ids``, ``logprobs`` (the engine's), ``text`` (decoded without
        special tokens), ``finished`` and the ``policy_version`` that answered."""
        prompts = [prompt_ids(self.tokenizer, q) for q in questions]
        generations = self.engine.generate(prompts, SamplingParams(**params))
        return [dict(prompt_ids=p, token_ids=g.token_ids, logprobs=g.logprobs, finished=g.finished,
                     text=self.tokenizer.decode(g.token_ids, skip_special_tokens=True),
                     policy_version=self.policy_version) for p, g in zip(prompts, generations)]
