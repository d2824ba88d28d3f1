"""Third-party backends behind one small interface each: generation (Hugging Face ``generate``; vLLM and SGLang
where installed; ``registry.py``) and training (``training/``: single process, DDP, FSDP2; Megatron-core)."""
