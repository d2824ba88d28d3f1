"""Causal language models as policies for text tasks: a tiny model and tokenizer built in code (no download), or a
local checkpoint directory (Qwen, Llama) loaded through the same code."""
