"""Full-size VLA checks for a GPU machine (run by scripts/gpu_checks.sh): OpenVLA-OFT (7.5B) and Pi0 (3.3B) at their
published sizes, random weights, ``dtype=bfloat16`` with LoRA rank 32, built directly on the GPU. Each policy goes
through what one RL iteration and a checkpoint do to it, and every step is asserted:

  build -> dtypes (trained weights float32 master weights, frozen ones bf16) -> act -> evaluate + backward (finite
  gradients on every trained weight) -> Adam step at lr 5e-6 (the trained weights move) -> the weight sync's payload
  (trained weights, own dtypes) -> the whole state dict through a safetensors checkpoint and back, bit for bit.

Prints one line per policy and writes ``$OUT/gpu_vla_checks.json`` (times, peak GPU memory of each phase, bytes);
exits 1 if any check failed (the others still run). Needs torch, transformers, peft and safetensors only (no Ray,
no simulator): ``PYTHONPATH=. python scripts/gpu_vla_checks.py``."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback

import numpy as np
import torch

from embodied_rl.models import build_policy
from embodied_rl.utils.checkpoint import load_checkpoint, save_checkpoint
from embodied_rl.workers.weights import host_weights, load_host_weights

GIB = 2 ** 30
DEVICE = os.environ.get("VLA_CHECK_DEVICE", "cuda")  # "cpu" with VLA_CHECK_SIZE=tiny: a dry run of this script
SIZE = os.environ.get("VLA_CHECK_SIZE", "full")
CUDA = DEVICE == "cuda"


class Phases:
    """Seconds and peak GPU memory (GiB) of each named phase."""

    def __init__(self):
        self.record: dict[str, dict] = {}

    def __call__(self, name: str):
        phases = self

        class Phase:
            def __enter__(self):
                if CUDA:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                self.start = time.perf_counter()

            def __exit__(self, *exc):
                if CUDA:
                    torch.cuda.synchronize()
                phases.record[name] = {"s": round(time.perf_counter() - self.start, 3),
                                       "peak_gib": round(torch.cuda.max_memory_allocated() / GIB, 3) if CUDA else 0,
                                       "after_gib": round(torch.cuda.memory_allocated() / GIB, 3) if CUDA else 0}

        return Phase()


def observations(batch: int, image: int = 224) -> dict:
    return {"rgb": torch.randint(0, 255, (batch, image, image, 3), dtype=torch.uint8, device=DEVICE),
            "state": torch.randn(batch, 9, device=DEVICE),
            "instruction": np.array(["pick up the red cube and lift it"] * batch)}


def check(name: str, batch: int = 8, chunk: int = 8) -> dict:
    if CUDA:
        torch.cuda.empty_cache()
    phases = Phases()
    result: dict = {"policy": name, "batch": batch, "chunk": chunk, "phases": phases.record, "failed": None}
    try:
        with phases("build"), torch.device(DEVICE):
            policy = build_policy(name, obs_dim=9, action_dim=7, obs_shapes={"rgb": [224, 224, 3], "state": [9]},
                                  action_chunk=chunk, size=SIZE, dtype="bfloat16", lora_rank=32)
        trained = [p for p in policy.parameters() if p.requires_grad]
        frozen = [p for p in policy.parameters() if not p.requires_grad]
        result.update(params=sum(p.numel() for p in policy.parameters()), trained_params=sum(p.numel() for p in trained),
                      weight_bytes=sum(p.numel() * p.element_size() for p in policy.parameters()))
        assert {p.dtype for p in trained} == {torch.float32}, f"trained dtypes {({p.dtype for p in trained})}"
        assert {p.dtype for p in frozen} == {torch.bfloat16}, f"frozen dtypes {({p.dtype for p in frozen})}"

        obs = observations(batch)
        with phases("act"):
            actions, logp, values, stored = policy.act(obs)
        assert torch.isfinite(actions).all() and torch.isfinite(logp).all() and torch.isfinite(values).all()
        obs.update(stored or {})

        optimizer = torch.optim.Adam(trained, lr=5e-6, eps=1e-5)
        before = [p.detach().clone() for p in trained]
        with phases("evaluate_backward"):
            new_logp, entropy, new_values = policy.evaluate(obs, actions)
            ratio = torch.exp(new_logp - new_logp.detach())
            loss = -(ratio * torch.randn_like(ratio)).mean() + 0.5 * new_values.float().pow(2).mean()
            loss.backward()
        result["logp_act_vs_evaluate"] = float((new_logp.detach() - logp).abs().max())
        missing = sum(p.grad is None for p in trained)
        assert missing == 0 or name == "pi0", f"{missing} trained weights got no gradient"
        assert all(torch.isfinite(p.grad).all() for p in trained if p.grad is not None), "non-finite gradient"
        # LoRA's A matrices get exactly zero gradient while B is zero (its initial value): they move from step 2
        pushed = [i for i, p in enumerate(trained) if p.grad is not None and bool(p.grad.abs().max() > 0)]
        with phases("optimizer_step"):
            optimizer.step()
        moved = [i for i, (p, b) in enumerate(zip(trained, before)) if not torch.equal(p.detach(), b)]
        result["trained_tensors_moved"] = f"{len(moved)}/{len(pushed)} with a gradient ({len(trained)} trained)"
        assert pushed and set(pushed) <= set(moved), "the Adam step at lr 5e-6 left weights with a gradient unchanged"
        del before
        optimizer.zero_grad(set_to_none=True)

        with phases("sync_payload"):
            payload = host_weights(policy, only_trained=True)
        result["sync_bytes"] = sum(v.numel() * v.element_size() for v in payload.values())
        assert all(v.dtype == torch.float32 for v in payload.values() if v.is_floating_point())

        with phases("checkpoint_save"):
            state = host_weights(policy)
            directory = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
            path = save_checkpoint(directory, 1, state, b"", {}, "", keep_last=1)
        result["checkpoint_bytes"] = (path / "model.safetensors").stat().st_size
        with torch.no_grad():
            for p in trained:
                p.zero_()
        with phases("checkpoint_load"):
            loaded = load_checkpoint(path).weights
            load_host_weights(policy, loaded)
        now = policy.state_dict()
        differing = [k for k, v in state.items() if not torch.equal(now[k].cpu(), v)]
        assert not differing, f"{len(differing)} tensors differ after the reload, e.g. {differing[:3]}"
        assert {str(v.dtype) for v in loaded.values()} >= {"torch.bfloat16", "torch.float32"}
        del state, loaded, payload
        plan_against_measurement(policy, obs, actions, batch, phases, result, optimizer)
    except Exception as error:  # report and go on to the next policy
        result["failed"] = f"{type(error).__name__}: {error}"
        traceback.print_exc()
    finally:
        policy = None  # noqa: F841  (free the GPU for the next policy)
    return result


def plan_against_measurement(policy, obs, actions, batch: int, phases: Phases, result: dict, optimizer) -> None:
    """``embodied-rl plan``'s figures for the phases measured (``models/memory.py``), and for OpenVLA-OFT one more
    evaluate + backward with activation checkpointing, measured and planned (Adam's moments now exist)."""
    from embodied_rl.models.memory import Parameters, compute_bytes, policy_stacks

    params, e, stacks = Parameters.of(policy), compute_bytes(policy), policy_stacks(policy)
    resident = params.weight_bytes + sum(b.numel() * b.element_size() for b in policy.buffers())
    activations = sum(s.activation_bytes(batch, e) for s in stacks)
    result["planned_gib"] = {"weights": resident / GIB,
                             "evaluate_backward": (resident + params.trained_bytes + activations) / GIB}
    if not policy.checkpointable_layers:
        return
    policy.enable_activation_checkpointing()
    policy.train()
    with phases("evaluate_backward_checkpointed"):
        new_logp, _, new_values = policy.evaluate(obs, actions)
        (new_logp.float().mean() + new_values.float().pow(2).mean()).backward()
    checkpointed = sum(s.activation_bytes(batch, e, checkpointing=True) for s in stacks)
    result["planned_gib"]["evaluate_backward_checkpointed"] = (
        resident + params.trained_bytes + params.adam_bytes() + checkpointed) / GIB
    optimizer.zero_grad(set_to_none=True)


def summary(r: dict) -> str:
    if r["failed"]:
        return f"{r['policy']} {SIZE} bf16 LoRA32: FAILED {r['failed']}"
    p = r["phases"]
    return (f"{r['policy']} {SIZE} bf16 LoRA32: {r['params'] / 1e9:.2f}B params ({r['trained_params'] / 1e6:.1f}M "
            f"trained), weights {r['weight_bytes'] / GIB:.1f} GiB; batch {r['batch']} x chunk {r['chunk']}: "
            f"act {p['act']['s']:.2f} s (peak {p['act']['peak_gib']:.1f} GiB), evaluate+backward "
            f"{p['evaluate_backward']['s']:.2f} s (peak {p['evaluate_backward']['peak_gib']:.1f} GiB), Adam step "
            f"{p['optimizer_step']['s']:.3f} s, moved {r['trained_tensors_moved']}, |logp act-evaluate| "
            f"{r['logp_act_vs_evaluate']:.2e}; sync payload {r['sync_bytes'] / 2**20:.0f} MiB; checkpoint "
            f"{r['checkpoint_bytes'] / GIB:.1f} GiB saved {p['checkpoint_save']['s']:.1f} s, reloaded bit for bit "
            f"{p['checkpoint_load']['s']:.1f} s: PASS; planned peaks (GiB) {json.dumps(r.get('planned_gib'))}, "
            f"checkpointed evaluate+backward measured {p.get('evaluate_backward_checkpointed', {}).get('peak_gib')}")


if __name__ == "__main__":
    if CUDA and not torch.cuda.is_available():
        print("no CUDA device: full-size VLA checks skipped")
        sys.exit(0)
    results = [check("openvla_oft"), check("pi0")]
    for r in results:
        print(summary(r), flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gpu_vla_checks.json"), "w") as file:
            json.dump(results, file, indent=1)
    sys.exit(1 if any(r["failed"] for r in results) else 0)
