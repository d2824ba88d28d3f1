"""Prompts through the tokenizer's chat template, and responses back to text."""

from __future__ import annotations


PROMPT_FORMATS = ("chat", "raw")


def prompt_ids(tokenizer, question: str, prompt_format: str = "chat", template: str = "{question}") -> list[int]:
    """Token ids of the prompt for ``question`` (put into ``template`` first). ``chat``: a user turn followed by the
    assistant's turn opening, through the tokenizer's chat template (the character tokenizer's ``Q: ...\\nA: ``, a
    Qwen or Llama checkpoint's own); ``raw``: the text itself with the tokenizer's special tokens (a base model
    without a chat template)."""
    content = template.replace("{question}", question)
    if prompt_format == "raw":
        return list(tokenizer(content, add_special_tokens=True)["input_ids"])
    text = tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                         add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def answer_ids(tokenizer, answer: str) -> list[int]:
    """The ids an SFT target response is made of: ``answer`` then end-of-sequence."""
    return list(tokenizer(answer, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]


def padding_id(tokenizer) -> int:
    """The id that fills padded positions: the tokenizer's pad token, else its end of sequence (Llama 3 and many base
    checkpoints have no pad token; padded positions are masked out, so any id does)."""
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has neither a pad nor an end-of-sequence token")
    return int(tokenizer.eos_token_id)


def build_lm(name: str, seed: int = 0):
    """``(model, tokenizer)``: ``tiny`` / ``small`` built in code, anything else a local checkpoint directory."""
    from embodied_rl.models.causal_lm.loading import TINY_SIZES, build_tiny_causal_lm, load_causal_lm

    return build_tiny_causal_lm(name, seed=seed) if name in TINY_SIZES else load_causal_lm(name)
