"""Train across two Ray nodes on one machine, as an operator whose run outgrew one machine would.

Starts two local Ray nodes (Ray's own cluster test utility: separate raylets, both on the loopback address), puts
the env workers on node 1 and the rollout and actor workers on node 0, and runs the real CLI
(`embodied-rl train --ray-address ...`) once per channel transport. Across the node boundary every byte travels
by TCP; with camera observations each env worker's trajectory is several MB. Prints one JSON line per run (wall
time, exit code, the run's last logged metrics) and a final line with the wall-time ratio.

    python scripts/two_node_run.py [--transports socket,auto] [--timeout 900] [key=value ...]

Extra ``key=value`` arguments override the training config (defaults: PushCube, rgb 64x64, CNN policy, one env
worker of 8 envs, 50-step rounds: 8 x 51 observations of 12 KB, ~5 MB per trajectory, 3 iterations).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULTS = ["env.obs_mode=rgb", "policy.name=cnn", "env.num_workers=1", "env.envs_per_worker=8",
            "rollout.num_workers=1", "rollout.steps_per_iteration=50", "total_env_steps=1200",
            "eval.every_iterations=0", "eval.num_episodes=8", "checkpoint.every_iterations=0",
            "algorithm.num_minibatches=4", "algorithm.update_epochs=1",
            "placement.nodes.env=1", "placement.nodes.rollout=0", "placement.nodes.actor=0"]


def last_metrics(run_dir: Path) -> dict:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines() if (run_dir / "metrics.jsonl").is_file() else []
    return json.loads(lines[-1]) if lines else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transports", default="socket,auto")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run before it counts as hung")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    from ray.cluster_utils import Cluster as RayTestCluster

    nodes = RayTestCluster(initialize_head=True, head_node_args={"num_cpus": 4})
    nodes.add_node(num_cpus=4)
    nodes.wait_for_nodes()
    walls = {}
    try:
        for transport in args.transports.split(","):
            run_dir = Path(tempfile.mkdtemp(prefix=f"two-node-{transport}-"))
            command = [sys.executable, "-m", "embodied_rl.cli", "train", "--task", "maniskill_pushcube",
                       "--ray-address", nodes.address, "--run-dir", str(run_dir / "run"),
                       f"channel_transport={transport}", *DEFAULTS, *args.overrides]
            start = time.perf_counter()
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout,
                                      env=dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0"))
                code, tail = done.returncode, done.stderr[-1500:]
            except subprocess.TimeoutExpired as expired:
                output = expired.stderr or b""
                output = output.decode(errors="replace") if isinstance(output, bytes) else output
                code, tail = "timeout", f"no end within {args.timeout:.0f} s; stderr: {output[-1200:]}"
            wall = time.perf_counter() - start
            metrics = last_metrics(run_dir / "run")
            walls[transport] = wall if code == 0 else None
            print(json.dumps({"transport": transport, "exit": code, "wall_s": round(wall, 1),
                              "env_steps": metrics.get("env_steps"),
                              "iteration": metrics.get("train/iteration"),
                              "sample_s": metrics.get("time/sample_s"),
                              "update_wall_s": metrics.get("time/update_wall_s"),
                              "stderr_tail": tail if code != 0 else ""}), flush=True)
    finally:
        nodes.shutdown()
    if len(walls) == 2 and all(walls.values()):
        (a, wa), (b, wb) = walls.items()
        print(json.dumps({"wall_ratio": f"{a}/{b}", "value": round(wa / wb, 3)}), flush=True)
    return 0 if all(walls.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
