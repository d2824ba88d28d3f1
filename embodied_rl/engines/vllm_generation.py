"""Generation with vLLM (``vllm.LLM``) on a local Hugging Face checkpoint directory.

Every vLLM specific of the project lives in this file. Written against vLLM 0.32 (V1 engine); releases without
``logprobs_mode`` are not supported:

- Log-probs: ``logprobs_mode="processed_logprobs"`` makes each reported log-prob that of the distribution the token
  was drawn from: after temperature and top-p (renormalised over the nucleus), as Hugging Face's ``scores``. vLLM's
  default, ``raw_logprobs``, would report the unscaled model distribution. Greedy requests (temperature 0) report the
  temperature-1 distribution, the interface's convention.
- Weight updates: ``collective_rpc`` into a worker extension (``worker_extension_cls``, a class vLLM mixes into its
  worker) instead of ``llm.llm_engine.model_executor.driver_worker.model_runner.model`` (gone in the V1 engine).
  Where the model runner's ``reload_weights`` takes ``weights_iterator`` (recent vLLM), that is used: it reruns the
  post-load processing, which matters on the CPU backend (it repacks linear weights for its GEMM kernels and drops
  the originals, so ``model.load_weights`` alone would not reach what runs). Older versions: ``model.load_weights``.
  The prefix cache is reset after an update: its KV blocks were computed with the old weights.
- Between turns on a GPU shared with the trainer (``release_between_turns``, which sets ``enable_sleep_mode``):
  ``sleep(level=1)`` moves the weights to host memory and drops the KV cache, ``wake_up()`` brings them back.
- The methods and options used here are checked against vLLM 0.33.0's own signatures
  (``engines/pinned_signatures.json``, ``tests/engines/test_engines_pinned_signatures.py``).
- The engine core runs in the calling process by default (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): no spawned
  process that needs a ``__main__`` guard, and weights reach the worker without serialisation. With
  ``in_process=False`` they go as ``torch.save`` bytes (vLLM's msgpack would turn the tensors into lists), and
  ``embodied_rl`` must import in vLLM's worker processes.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import numpy as np

from embodied_rl.engines.generation import Generation, SamplingParams


class WeightUpdateExtension:
    """Mixed into vLLM's worker class; its method runs inside each worker via ``collective_rpc``."""

    def embodied_rl_load_weights(self, named_tensors: list | bytes) -> None:
        if isinstance(named_tensors, bytes):  # from another process: ``torch.save`` bytes (see ``load_weights``)
            import io

            import torch

            named_tensors = list(torch.load(io.BytesIO(named_tensors), weights_only=True).items())
        runner = self.model_runner
        reload = getattr(runner, "reload_weights", None)
        if reload is not None and "weights_iterator" in inspect.signature(reload).parameters:
            self.reload_weights(weights_iterator=iter(named_tensors))  # the worker's wrapper sets vLLM's config
        else:
            model = runner.get_model() if hasattr(runner, "get_model") else runner.model
            model.load_weights(weights=named_tensors)


FUSED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Hugging Face projections vLLM stores as one tensor: an update must carry all of a group or none."""


def _check_fused_groups(names: set[str]) -> None:
    for name in sorted(names):
        parts = name.split(".")  # ...layers.3.self_attn.q_proj.weight
        for group in FUSED:
            if len(parts) >= 2 and parts[-2] in group:
                missing = [n for n in (".".join([*parts[:-2], m, parts[-1]]) for m in group) if n not in names]
                if missing:
                    raise ValueError(f"{name} without {', '.join(missing)}: vLLM fuses {'/'.join(group)} into one "
                                     "tensor, so they are updated together")


def checkpoint_eos_id(checkpoint_dir: Path) -> int | None:
    """The (first) ``eos_token_id`` of a checkpoint's ``config.json``."""
    eos = json.loads((checkpoint_dir / "config.json").read_text()).get("eos_token_id")
    return eos[0] if isinstance(eos, list) else eos


class VLLMGenerationEngine:
    """Batched sampling with ``vllm.LLM`` from ``checkpoint_dir`` (``config.json`` + safetensors + tokenizer).

    ``eos_id``: where responses end (default: ``eos_token_id`` of ``config.json``). ``in_process``: run vLLM's
    engine core in this process (see the module notes). ``llm_options`` go to ``vllm.LLM`` (``dtype``,
    ``gpu_memory_utilization``, ``enforce_eager``, ``max_model_len``, ...).

    Seeds: vLLM seeds each request, so a call with ``seed=s`` gives prompt ``i`` the seed ``s + i`` (repeated
    prompts, as in a group of samples per question, still draw different responses).
    """

    def __init__(self, checkpoint_dir: str | Path, eos_id: int | None = None, in_process: bool = True,
                 release_between_turns: bool = False, **llm_options):
        checkpoint_dir = Path(checkpoint_dir)
        if not (checkpoint_dir / "config.json").is_file():
            raise FileNotFoundError(f"{checkpoint_dir} is not a Hugging Face checkpoint directory (no config.json)")
        self.in_process = in_process
        if in_process:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm import LLM

        self.eos_id = checkpoint_eos_id(checkpoint_dir) if eos_id is None else eos_id
        options = dict(seed=0, logprobs_mode="processed_logprobs",
                       worker_extension_cls=f"{__name__}.{WeightUpdateExtension.__name__}")
        if release_between_turns:
            options.update(enable_sleep_mode=True)
        options.update(llm_options)
        self.releases = bool(options.get("enable_sleep_mode"))
        self.llm = LLM(model=str(checkpoint_dir), **options)

    def _sampling_params(self, params: SamplingParams, row: int):
        from vllm import SamplingParams as VLLMSamplingParams

        greedy = params.temperature == 0
        return VLLMSamplingParams(
            max_tokens=params.max_new_tokens, temperature=params.temperature, top_p=1.0 if greedy else params.top_p,
            seed=None if params.seed is None or greedy else params.seed + row,
            logprobs=0,  # just the sampled token's log-prob
            stop_token_ids=None if self.eos_id is None else [self.eos_id], detokenize=False)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        from vllm.inputs import TokensPrompt

        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                                    [self._sampling_params(params, row) for row in range(len(prompts))],
                                    use_tqdm=False)
        results = []
        for output in outputs:  # in prompt order
            completion = output.outputs[0]
            tokens = list(completion.token_ids)
            logprobs = [completion.logprobs[t][token].logprob for t, token in enumerate(tokens)]
            results.append(Generation(tokens, logprobs, completion.finish_reason == "stop"))
        return results

    def load_weights(self, state_dict: dict) -> None:
        """Copy ``{name: tensor or array}`` (Hugging Face names) into the engine's model in place. vLLM fuses some
        projections (q/k/v, gate/up) and a part of one would load wrongly: ``ValueError``. Leaving out whole
        layers is fine (vLLM logs a warning for each)."""
        import torch

        _check_fused_groups(set(state_dict))
        named = [(name, value if isinstance(value, torch.Tensor) else torch.from_numpy(np.array(value)))
                 for name, value in state_dict.items()]
        if self.in_process:
            payload = named
        else:  # vLLM's msgpack turns tensors nested in untyped arguments into lists: send bytes
            import io

            buffer = io.BytesIO()
            torch.save(dict(named), buffer)
            payload = buffer.getvalue()
        self.llm.collective_rpc("embodied_rl_load_weights", args=(payload,))
        self.llm.reset_prefix_cache()

    def release_memory(self) -> None:
        """Free the engine's GPU memory for the trainer's turn: the weights to host memory, the KV cache dropped."""
        if self.releases:
            self.llm.sleep(level=1)

    def resume_memory(self) -> None:
        """Take the memory back for a generation turn (the weights as they went to sleep)."""
        if self.releases:
            self.llm.wake_up()

    def close(self) -> None:
        """Stop vLLM's engine core (and its processes, if any)."""
        core = getattr(self.llm.llm_engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
