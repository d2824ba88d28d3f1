"""Full-size VLA checks for a GPU machine (run by scripts/gpu_checks.sh): OpenVLA-OFT and Pi0 at their published
sizes with random weights in bf16, LoRA rank 32, one act + evaluate + backward each; prints time and peak memory.
A policy that does not fit or fails prints its error and the script goes on (exit 1 at the end)."""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from embodied_rl.models import build_policy


def check(name: str, batch: int = 2, chunk: int = 8, image: int = 224) -> bool:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    try:
        policy = build_policy(name, obs_dim=9, action_dim=7, obs_shapes={"rgb": [image, image, 3], "state": [9]},
                              action_chunk=chunk, size="full", dtype="bfloat16", lora_rank=32).to("cuda")
        built = time.perf_counter() - start
        obs = {"rgb": torch.randint(0, 255, (batch, image, image, 3), dtype=torch.uint8, device="cuda"),
               "state": torch.randn(batch, 9, device="cuda"),
               "instruction": np.array(["pick up the red cube"] * batch)}
        t0 = time.perf_counter()
        actions, logp, values, *stored = policy.act(obs)
        torch.cuda.synchronize()
        act_s = time.perf_counter() - t0
        obs.update(stored[0] if stored and stored[0] else {})
        t0 = time.perf_counter()
        new_logp, entropy, new_values = policy.evaluate(obs, actions)
        (-(new_logp.float().mean()) + new_values.float().pow(2).mean()).backward()
        torch.cuda.synchronize()
        backward_s = time.perf_counter() - t0
        params = sum(p.numel() for p in policy.parameters())
        print(f"{name} full bf16 LoRA32: {params / 1e9:.2f}B params, built {built:.0f} s, act {act_s:.2f} s, "
              f"evaluate+backward {backward_s:.2f} s, |logp diff| {float((new_logp - logp).abs().max()):.2e}, "
              f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB, actions {tuple(actions.shape)}", flush=True)
        return True
    except Exception as error:  # report and go on to the next check
        print(f"{name} full: FAILED {type(error).__name__}: {error}", flush=True)
        return False


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("no CUDA device: full-size VLA checks skipped")
        sys.exit(0)
    results = [check("openvla_oft"), check("pi0")]
    sys.exit(0 if all(results) else 1)
