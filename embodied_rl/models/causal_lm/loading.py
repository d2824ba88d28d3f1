"""Building and loading causal LMs: ``tiny`` (a small Llama and the character tokenizer, built in code) or a local
checkpoint directory in the Hugging Face layout (``config.json`` + safetensors + tokenizer files), never a download.
"""

from __future__ import annotations

from pathlib import Path

from embodied_rl.models.causal_lm.char_tokenizer import build_char_tokenizer

TINY_SIZES = {
    # hidden, layers, heads, intermediate: a few hundred thousand parameters, trainable on a laptop CPU
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=192),
    "small": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=384),
}


def build_tiny_causal_lm(size: str = "tiny", max_positions: int = 256, seed: int = 0):
    """``(model, tokenizer)``: a randomly initialised ``LlamaForCausalLM`` of ``TINY_SIZES[size]`` over the
    character tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if size not in TINY_SIZES:
        raise ValueError(f"size={size!r}; allowed: {', '.join(TINY_SIZES)}")
    tokenizer = build_char_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=max_positions,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True, **TINY_SIZES[size])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model, tokenizer


def load_causal_lm(directory: str | Path):
    """``(model, tokenizer)`` from a local checkpoint directory (any ``AutoModelForCausalLM`` architecture)."""
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(directory)
    model = AutoModelForCausalLM.from_pretrained(Path(directory), local_files_only=True)
    return model, tokenizer


def load_tokenizer(name: str | Path):
    """The tokenizer alone of what ``build_lm(name)`` builds (no model, no weights read): the character tokenizer
    for ``tiny`` / ``small``, else the checkpoint directory's own (``AutoTokenizer``, local files only)."""
    if str(name) in TINY_SIZES:
        return build_char_tokenizer()
    from transformers import AutoTokenizer

    directory = Path(name)
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(f"{directory} is not a Hugging Face checkpoint directory (no config.json); "
                                "models are loaded from local files only")
    return AutoTokenizer.from_pretrained(directory, local_files_only=True)


def save_causal_lm(model, tokenizer, directory: str | Path, dtype=None, state: dict | None = None) -> Path:
    """Write ``model`` and ``tokenizer`` in the Hugging Face layout (safetensors), loadable by ``load_causal_lm``
    and by ``transformers`` itself. ``dtype`` (a ``torch.dtype``): the weights written in it and declared in
    ``config.json`` (a trainer's float32 master weights saved as the bf16 checkpoint they came from); None: as held.
    ``state``: the weights to write instead of ``model``'s own (LoRA merged into the plain names)."""
    import json

    directory = Path(directory)
    if state is not None or dtype is not None:
        state = {k: v.to(dtype) if dtype is not None and v.is_floating_point() else v
                 for k, v in (state if state is not None else model.state_dict()).items()}
    model.save_pretrained(directory, safe_serialization=True, state_dict=state)
    if dtype is not None:
        config_file = directory / "config.json"
        config = json.loads(config_file.read_text())
        config["dtype"] = str(dtype).removeprefix("torch.")
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tokenizer.save_pretrained(directory)
    return directory
