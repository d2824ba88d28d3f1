"""Tiny checkpoints in the layouts of real ones, to test the big path small: a Qwen2 (ChatML template, a pad token)
or a Llama-3-style model (header template, no pad token), each with a byte-level BPE tokenizer trained here with
``tokenizers``, written by ``save_pretrained`` in bf16 (as Qwen and Llama checkpoints are published) with an
optional ``generation_config.json`` (published checkpoints set e.g. a repetition penalty or top-k there).

    write_tiny_checkpoint("/tmp/qwen2-tiny", "qwen2")      # then: embodied-rl train ... model.name=/tmp/qwen2-tiny
"""

from __future__ import annotations

from pathlib import Path

ARCHITECTURES = ("qwen2", "llama3")

QWEN2_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA3_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                   "{{ m['content'] }}<|eot_id|>{% endfor %}"
                   "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
SPECIAL_TOKENS = {
    "qwen2": dict(special=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], eos="<|im_end|>", pad="<|endoftext|>",
                  bos=None, template=QWEN2_TEMPLATE),
    "llama3": dict(special=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                            "<|eot_id|>"], eos="<|eot_id|>", pad=None, bos="<|begin_of_text|>",
                   template=LLAMA3_TEMPLATE),
}
SIZE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=192,
            max_position_embeddings=256, tie_word_embeddings=True)


def default_corpus() -> list[str]:
    """Arithmetic questions and answers (the math tasks' language) and a little English, for the BPE merges."""
    rows = [f"{a}+{b}={a + b}" for a in range(0, 100, 3) for b in range(0, 100, 7)]
    rows += [f"{a}-{b}={a - b}" for a in range(0, 100, 7) for b in range(0, 100, 3)]
    rows += [f"What is {a} * {b}? The answer is {a * b}." for a in range(12) for b in range(12)]
    rows += ["user", "assistant", "system", "Solve the problem and give the final answer.", "#### 42"]
    return rows


def train_bpe_tokenizer(architecture: str, vocab_size: int = 512, corpus: list[str] | None = None):
    """A ``PreTrainedTokenizerFast``: byte-level BPE (every byte has a token, so any text encodes) trained on
    ``corpus``, with the architecture's special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture={architecture!r}; allowed: {', '.join(ARCHITECTURES)}")
    spec = SPECIAL_TOKENS[architecture]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=spec["special"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(corpus or default_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=spec["eos"], pad_token=spec["pad"],
                                        bos_token=spec["bos"])
    tokenizer.chat_template = spec["template"]
    return tokenizer


def write_tiny_checkpoint(directory: str | Path, architecture: str = "qwen2", dtype: str = "bfloat16",
                          generation_config: dict | None = None, seed: int = 0, size: dict | None = None,
                          corpus: list[str] | None = None, vocab_size: int = 512) -> Path:
    """Write a randomly initialised tiny ``architecture`` model and its BPE tokenizer to ``directory`` by
    ``save_pretrained`` (weights in ``dtype``); ``generation_config``: sampling defaults written to
    ``generation_config.json`` as a published checkpoint ships them; ``size``: the model's sizes instead of the tiny
    ones (e.g. a published model's ``hidden_size``, ``num_hidden_layers``, ... and ``vocab_size``: rows past the
    tokenizer's own tokens are there, as in Qwen's padded embedding); ``corpus`` and ``vocab_size``: the BPE
    tokenizer's training text and size (default: ``default_corpus``, 512). Returns the directory."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tokenizer = train_bpe_tokenizer(architecture, vocab_size, corpus)
    ids = dict(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
               pad_token_id=tokenizer.pad_token_id)
    sizes = {**SIZE, **ids, **(size or {})}
    if sizes["vocab_size"] < len(tokenizer):
        raise ValueError(f"vocab_size={sizes['vocab_size']} is below the tokenizer's {len(tokenizer)} tokens")
    if architecture == "qwen2":
        config, model_class = Qwen2Config(**sizes, rope_theta=1e6), Qwen2ForCausalLM
    else:
        config, model_class = LlamaConfig(**sizes, rope_theta=5e5), LlamaForCausalLM
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.to(getattr(torch, dtype))
    if generation_config:
        model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, **generation_config)
    directory = Path(directory)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
