"""Peak host memory and time of building an OpenVLA-OFT from a checkpoint in the published layout.

The full OpenVLA-OFT architecture with its language model cut to ``--layers`` of 32 layers, random weights, saved
once in bf16 (``save_published_checkpoint``) under ``--directory``; then each ``--repeat`` builds the policy from
it (``policy.options.checkpoint``, LoRA rank 32 as the recipes: the base stays bf16) in a fresh process and prints
its peak anonymous and resident memory and seconds. Run it
with ``PYTHONPATH`` set to the checkout whose loading path is measured.

    PYTHONPATH=. python scripts/checkpoint_load_memory.py --layers 8 --directory /tmp/oft_l8
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

GIB = 2 ** 30


def policy(layers: int, checkpoint: str | None, lora_rank: int = 32):
    from embodied_rl.models import build_policy
    from largest_model_cpu import cut_language_model  # (scripts/ is on the path of a script run from it)

    cut_language_model(layers)
    return build_policy("openvla_oft", obs_dim=9, action_dim=7, size="full", action_chunk=8, dtype="bfloat16",
                        lora_rank=lora_rank,
                        obs_shapes={"rgb": [224, 224, 3], "state": [9]}, checkpoint=checkpoint)


def watch_anonymous_memory() -> list[int]:
    """A list whose max is this process's peak anonymous resident memory (bytes), sampled every 10 ms: the memory
    a load holds of its own. Resident memory also counts a checkpoint's file pages mapped while they are read,
    which the kernel drops under pressure (``peak_rss_gib`` says both)."""
    import threading

    seen = [0]

    def watch():
        while True:
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("RssAnon:"):
                        seen.append(int(line.split()[1]) * 1024)
            time.sleep(0.01)

    threading.Thread(target=watch, daemon=True).start()
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--directory", required=True)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--load-once", action="store_true", help=argparse.SUPPRESS)  # the measured child
    args = parser.parse_args()
    if args.load_once:
        anonymous = watch_anonymous_memory()
        start = time.perf_counter()
        built = policy(args.layers, args.directory)
        print(json.dumps({"parameters_b": round(sum(p.numel() for p in built.parameters()) / 1e9, 3),
                          "seconds": round(time.perf_counter() - start, 1),
                          "peak_anonymous_gib": round(max(anonymous) / GIB, 2),
                          "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, 2)}))
        return 0
    if not os.path.exists(os.path.join(args.directory, "config.json")):
        from embodied_rl.models.openvla import save_published_checkpoint

        save_published_checkpoint(policy(args.layers, None), args.directory)
    for _ in range(args.repeat):
        done = subprocess.run([sys.executable, __file__, "--layers", str(args.layers), "--directory", args.directory,
                               "--load-once"], capture_output=True, text=True)
        print(done.stdout.strip() or done.stderr.strip().splitlines()[-1], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
