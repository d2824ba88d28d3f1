"""A character-level tokenizer built in code: a real ``transformers`` fast tokenizer (``tokenizers`` WordLevel over
single characters), with a chat template, saved and loaded like any Hugging Face tokenizer."""

from __future__ import annotations

import string

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
CHARACTERS = string.digits + string.ascii_letters + " +-*/=()[]{}.,:;?!'\"#$%&<>^_|~@\\\n"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}Q: {{ message['content'] }}\n"
    "{% elif message['role'] == 'assistant' %}A: {{ message['content'] }}{{ eos_token }}\n"
    "{% else %}{{ message['content'] }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}A: {% endif %}")
"""``Q: <question>\\nA: `` before the answer: short enough for a tiny model to learn quickly."""


def build_char_tokenizer():
    """A ``PreTrainedTokenizerFast``: one id per character of ``CHARACTERS``, special tokens first (pad 0, bos 1,
    eos 2, unk 3); unknown characters map to ``<unk>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate([PAD, BOS, EOS, UNK, *CHARACTERS])}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")  # every character its own token
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, bos_token=BOS, eos_token=EOS,
                                        unk_token=UNK)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
