"""Generation with SGLang (``sglang.Engine``, GPU only) on a local Hugging Face checkpoint directory.

Every SGLang specific of the project lives in this file. Written against SGLang 0.5:

- Log-probs (``return_logprob=True``): SGLang reports log softmax(logits / temperature), the distribution sampled
  from, and for greedy requests the temperature-1 distribution, as the interface asks. Unlike Hugging Face and vLLM
  they are not renormalised over the top-p nucleus, so with ``top_p < 1`` they are lower by log(nucleus mass).
  ``SGLANG_RETURN_ORIGINAL_LOGPROB=1`` in the environment would switch them to the unscaled distribution: leave it
  unset.
- Seeds: ``sampling_seed`` (prompt ``i`` of a call with ``seed=s`` gets ``s + i``) takes effect only with
  ``enable_deterministic_inference=True``; otherwise sampling follows the engine's ``random_seed`` stream.
- Weight updates: ``update_weights_from_tensor`` (in place, radix cache flushed).
- Between turns on a GPU shared with the trainer (``release_between_turns``): ``release_memory_occupation`` frees
  the weights and the KV cache (``enable_memory_saver``; ``enable_weights_cpu_backup`` keeps a host copy of the
  weights, so a turn without a weight update still samples from them), ``resume_memory_occupation`` takes them back.

The methods and options used here are checked against SGLang 0.5.23's own signatures
(``engines/pinned_signatures.json``, ``tests/engines/test_engines_pinned_signatures.py``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from embodied_rl.engines.generation import Generation, SamplingParams
from embodied_rl.engines.vllm_generation import checkpoint_eos_id


class SGLangGenerationEngine:
    """Batched sampling with ``sglang.Engine`` from ``checkpoint_dir``; ``eos_id`` as in ``VLLMGenerationEngine``;
    ``engine_options`` go to ``sglang.Engine`` (``dtype``, ``mem_fraction_static``, ``attention_backend``, ...)."""

    def __init__(self, checkpoint_dir: str | Path, eos_id: int | None = None, release_between_turns: bool = False,
                 **engine_options):
        checkpoint_dir = Path(checkpoint_dir)
        if not (checkpoint_dir / "config.json").is_file():
            raise FileNotFoundError(f"{checkpoint_dir} is not a Hugging Face checkpoint directory (no config.json)")
        import sglang

        self.eos_id = checkpoint_eos_id(checkpoint_dir) if eos_id is None else eos_id
        options = dict(random_seed=0, log_level="error")
        if release_between_turns:
            options.update(enable_memory_saver=True, enable_weights_cpu_backup=True)
        options.update(engine_options)
        self.releases = bool(options.get("enable_memory_saver"))
        self.engine = sglang.Engine(model_path=str(checkpoint_dir), **options)

    def _sampling_params(self, params: SamplingParams, row: int) -> dict:
        greedy = params.temperature == 0
        options = dict(max_new_tokens=params.max_new_tokens, temperature=params.temperature,
                       top_p=1.0 if greedy else params.top_p)
        if self.eos_id is not None:
            options["stop_token_ids"] = [self.eos_id]
        if params.seed is not None and not greedy:
            options["sampling_seed"] = params.seed + row
        return options

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        outputs = self.engine.generate(input_ids=[list(p) for p in prompts],
                                       sampling_params=[self._sampling_params(params, r) for r in range(len(prompts))],
                                       return_logprob=True)
        results = []
        for output in outputs:
            meta = output["meta_info"]
            pairs = meta["output_token_logprobs"]  # (logprob, token_id, text or None) per generated token
            finish = meta.get("finish_reason") or {}
            results.append(Generation([int(p[1]) for p in pairs], [float(p[0]) for p in pairs],
                                      finish.get("type") == "stop"))
        return results

    def load_weights(self, state_dict: dict) -> None:
        """Copy ``{name: tensor or array}`` (Hugging Face names) into the engine's model in place."""
        import torch

        named = [(name, value if isinstance(value, torch.Tensor) else torch.from_numpy(np.array(value)))
                 for name, value in state_dict.items()]
        result = self.engine.update_weights_from_tensor(named_tensors=named)
        success, message = result if isinstance(result, tuple) else (True, "")
        if not success:
            raise RuntimeError(f"SGLang weight update failed: {message}")

    def release_memory(self) -> None:
        """Free the engine's GPU memory (weights and KV cache) for the trainer's turn."""
        if self.releases:
            self.engine.release_memory_occupation()

    def resume_memory(self) -> None:
        """Take the memory back for a generation turn (the weights as they were released)."""
        if self.releases:
            self.engine.resume_memory_occupation()

    def close(self) -> None:
        self.engine.shutdown()
