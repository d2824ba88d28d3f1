"""Causal-LM checks for a GPU machine (run by scripts/gpu_checks.sh), without Ray or a generation engine: a tiny Qwen2
with a locally trained BPE tokenizer, saved in bf16 by ``save_pretrained`` and loaded on the GPU, goes through what
the LM actor and the HF generation worker do to it, each step asserted:

  float32 master weights, chunked log-probs under autocast to bf16 against the full-logits path, backward and an
  AdamW step that moves the weights; LoRA adapters whose merged weights give the LoRA model's logits; HF sampling from
  a checkpoint whose generation_config sets a repetition penalty, whose log-probs equal the trainer's (float32);
  the trainer's memory features at a published shape (Qwen2.5-0.5B-Instruct's, random weights): micro-batched,
  checkpointed passes under bf16 autocast give the one-pass gradient and a lower peak (torch.cuda's own count).

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


def check_micro_batches(directory: Path) -> str:
    """Qwen2.5-0.5B's shape, float32 masters, bf16 autocast, 16 rows of 256 + 256 tokens: the token-mean loss's
    gradient in one pass against 4 checkpointed micro-batches of 4 (each weighted by its share of the tokens)."""
    import json

    from transformers import AutoConfig, AutoModelForCausalLM

    from embodied_rl.engines.training.micro_batches import accumulation_weight, micro_batches
    from embodied_rl.workers.lm_rows import enable_activation_checkpointing

    shape = Path("embodied_rl/configs/recipes/reasoning/shapes/qwen2.5-0.5b-instruct/config.json")
    config = AutoConfig.for_model(**{k: v for k, v in json.loads(shape.read_text()).items()
                                     if k not in ("architectures", "torch_dtype")})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(device=DEVICE, dtype=torch.float32).train()
    rows = 16
    prompts = [torch.randint(10, 1000, (256,)).tolist() for _ in range(rows)]
    responses = [torch.randint(10, 1000, (128 + 8 * i,)).tolist() for i in range(rows)]
    total = sum(len(r) for r in responses)

    def gradient(passes, checkpointing: bool) -> tuple[dict, float]:
        if checkpointing:
            enable_activation_checkpointing(model)
        else:
            (getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable)()
        model.zero_grad(set_to_none=True)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        for part in passes:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logp, mask = logprobs.response_logprobs(model, [prompts[i] for i in part],
                                                        [responses[i] for i in part], 0)
            loss = -(logp * mask).sum() / mask.sum()
            (loss * accumulation_weight(mask.sum().item(), total)).backward()
        peak = (torch.cuda.max_memory_allocated() - base) / 2 ** 30
        return {n: p.grad.detach().clone() for n, p in model.named_parameters()}, peak

    whole, whole_peak = gradient([list(range(rows))], False)
    parts = micro_batches(list(range(rows)), [len(p) + len(r) for p, r in zip(prompts, responses)], max_rows=4)
    split, split_peak = gradient(parts, True)
    scale = max(float(g.abs().max()) for g in whole.values())
    difference = max(float((whole[n] - split[n]).abs().max()) for n in whole) / scale
    assert difference < 5e-2, f"micro-batched gradient differs from the one-pass gradient by {difference:.2e}"
    assert split_peak < 0.5 * whole_peak, f"peak {split_peak:.2f} GiB micro-batched vs {whole_peak:.2f} in one pass"
    return (f"Qwen2.5-0.5B shape, 16 rows: gradient difference {difference:.1e} of its largest entry; peak above "
            f"the weights {whole_peak:.2f} GiB in one pass, {split_peak:.2f} GiB in 4 checkpointed micro-batches")


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
                                   ("generation config", check_generation_config, fp32),
                                   ("micro-batches at 0.5B", check_micro_batches, bf16)):
        try:
            print(f"PASS {name}: {check(directory)}", flush=True)
        except Exception as error:  # report and go on
            traceback.print_exc()
            print(f"FAIL {name}: {type(error).__name__}: {error}", flush=True)
            failed = True
    sys.exit(1 if failed else 0)
