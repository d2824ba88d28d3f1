"""Causal-LM checks for a GPU machine (run by scripts/gpu_checks.sh), without Ray or a generation engine: a tiny Qwen2
with a locally trained BPE tokenizer, saved in bf16 by ``save_pretrained`` and loaded on the GPU, goes through what
the LM actor and the HF generation worker do to it, each step asserted:

  float32 master weights, chunked log-probs under autocast to bf16 against the full-logits path, backward and an
  AdamW step that moves the weights; LoRA adapters whose merged weights give the LoRA model's logits; HF sampling from
  a checkpoint whose generation_config sets a repetition penalty, whose log-probs equal the trainer's (float32).

One PASS/FAIL line per check; exit 1 on a failure. ``PYTHONPATH=. python scripts/gpu_lm_checks.py``."""

from __future__ import annotations

import sys
import tempfile
import traceback
from pathlib import Path

import torch

from embodied_rl.engines.generation import SamplingParams
from embodied_rl.engines.registry import make_generation_engine
from embodied_rl.models.causal_lm import logprobs
from embodied_rl.models.causal_lm.chat import padding_id, prompt_ids
from embodied_rl.models.causal_lm.loading import load_causal_lm
from embodied_rl.models.causal_lm.lora import add_lora, merged_state_dict
from embodied_rl.models.causal_lm.tiny_checkpoints import write_tiny_checkpoint

DEVICE = "cuda"
PROMPTS = [[3, 4, 5, 6], [7, 8], [9, 10, 11]]
RESPONSES = [[12, 13, 14], [15, 16, 17, 18, 19], [20]]


def check_mixed_precision(directory: Path) -> str:
    model, _ = load_causal_lm(directory)
    assert model.dtype == torch.bfloat16
    model.to(device=DEVICE, dtype=torch.float32).train()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logprobs.CHUNK_TOKENS = 3
        chunked, mask = logprobs.response_logprobs(model, PROMPTS, RESPONSES, 0, 0.7)
        full, _ = logprobs.response_logprobs(model, PROMPTS, RESPONSES, 0, 0.7, full_logits=True)
    difference = float(((chunked - full).abs() * mask).max().detach())
    assert difference < 1e-2, f"chunked vs full log-probs differ by {difference}"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    (-(chunked * mask).sum()).backward()
    optimizer.step()
    moved = sum(int(not torch.equal(p.detach(), before[n])) for n, p in model.named_parameters())
    assert moved >= 0.9 * len(before), f"{moved} of {len(before)} tensors moved at lr 1e-6"
    return f"chunked vs full log-probs (bf16 autocast) {difference:.1e}, AdamW at 1e-6 moved {moved}/{len(before)}"


def check_lora(directory: Path) -> str:
    model, _ = load_causal_lm(directory)
    plain, _ = load_causal_lm(directory)
    add_lora(model, 4)
    model.to(DEVICE)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    plain.load_state_dict(merged_state_dict(model))
    plain.to(DEVICE)
    ids = torch.tensor([[5, 6, 7, 8, 9]], device=DEVICE)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        difference = float((plain(input_ids=ids).logits.float() - model(input_ids=ids).logits.float()).abs().max())
    assert difference < 0.1, f"merged vs LoRA logits differ by {difference}"
    return f"merged LoRA weights vs the LoRA model, bf16 logits: max difference {difference:.1e}"


def check_generation_config(directory: Path) -> str:
    model, tokenizer = load_causal_lm(directory)
    model.to(DEVICE)
    engine = make_generation_engine("hf", model, tokenizer)
    prompts = [prompt_ids(tokenizer, q) for q in ("1+2", "34-5", "7*8", "9")]
    generations = engine.generate(prompts, SamplingParams(max_new_tokens=12, temperature=1.0, seed=3))
    responses = [g.token_ids for g in generations]
    trainer, mask = logprobs.response_logprobs(model, prompts, responses, padding_id(tokenizer))
    sampler = torch.zeros_like(trainer)
    for row, generation in enumerate(generations):
        sampler[row, :len(generation.logprobs)] = torch.tensor(generation.logprobs, device=DEVICE)
    difference = float(((trainer - sampler).abs() * mask).max())
    assert difference < 1e-3, f"sampler vs trainer log-probs differ by {difference}"
    return f"repetition penalty 2 in generation_config: sampler vs trainer log-probs {difference:.1e} (float32)"


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("no CUDA device: LM checks skipped")
        sys.exit(0)
    root = Path(tempfile.mkdtemp())
    bf16 = write_tiny_checkpoint(root / "qwen2", "qwen2")
    fp32 = write_tiny_checkpoint(root / "qwen2_fp32", "qwen2", dtype="float32",
                                 generation_config=dict(repetition_penalty=2.0, top_k=3, do_sample=True))
    failed = False
    for name, check, directory in (("mixed precision", check_mixed_precision, bf16), ("lora", check_lora, bf16),
                                   ("generation config", check_generation_config, fp32)):
        try:
            print(f"PASS {name}: {check(directory)}", flush=True)
        except Exception as error:  # report and go on
            traceback.print_exc()
            print(f"FAIL {name}: {type(error).__name__}: {error}", flush=True)
            failed = True
    sys.exit(1 if failed else 0)
