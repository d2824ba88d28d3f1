"""8-bit rollout copies (FlashRL's quantised rollout): the generation engine samples from an int8 copy of the
trained model while the trainer keeps full precision; truncated importance sampling (``algorithm.tis_cap``)
corrects the mismatch between the two distributions.

On CPU the copy is torch's dynamic int8 quantisation of every ``nn.Linear`` (weights int8 per tensor, activations
quantised on the fly); embeddings and norms stay float. ``torch.ao.quantization`` is deprecated in favour of
torchao, but torchao has no build for torch 2.13 here; this is the one file that touches it.
"""

from __future__ import annotations

import warnings

QUANTIZATIONS = ("none", "int8")


def quantized_copy(model, quantization: str):
    """A copy of ``model`` for sampling: ``model`` itself for ``none``, else an int8 copy (``model`` is unchanged;
    re-quantise after each weight update)."""
    if quantization == "none":
        return model
    if quantization != "int8":
        raise ValueError(f"quantization={quantization!r}; allowed: {', '.join(QUANTIZATIONS)}")
    import torch
    from torch.ao.quantization import quantize_dynamic

    if any(parameter.device.type != "cpu" for parameter in model.parameters()):
        raise ValueError("quantization='int8' is torch's dynamic quantisation, which runs on the CPU only; on a GPU "
                         "use rollout.engine=vllm or sglang with their own quantisation options")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation notice of torch.ao.quantization, on every call
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=False).eval()


def count_int8_linears(model) -> int:
    """How many Linear layers of ``model`` are int8 (0 for a full-precision model)."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

    return sum(isinstance(m, DynamicQuantizedLinear) for m in model.modules())
