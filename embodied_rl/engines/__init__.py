"""Third-party backends behind one small interface each (generation: Hugging Face now; vLLM and SGLang to come)."""
