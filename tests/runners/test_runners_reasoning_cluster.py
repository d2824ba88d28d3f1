"""``embodied-rl train --task math_arith --ray-address A`` runs its workers on the Ray cluster at A: the CLI process
starts no Ray daemons of its own (an embedded Ray would be its children: gcs_server, raylet)."""

import json
import time

import psutil
import pytest
import ray

from tests_helpers import TrackedProcess

SMALL = ["env.count=50", "env.heldout_count=4", "sft.steps=2", "sft.batch_size=4", "rl.iterations=1",
         "rl.prompts_per_iteration=2", "algorithm.group_size=2", "eval.num_problems=2",
         "rollout.max_new_tokens=2", "torch_threads=1"]


def _names(pids: set[int]) -> set[str]:
    names = set()
    for pid in pids:
        try:
            names.add(psutil.Process(pid).name())
        except psutil.NoSuchProcess:
            pass
    return names


# Left out of the default run (CI time; pytest -m heavy runs it): joining a cluster is tested in
# test_runners_multi_node.
@pytest.mark.heavy
def test_a_reasoning_run_joins_an_existing_ray_cluster(tmp_path, cluster):
    address = ray.get_runtime_context().gcs_address
    process = TrackedProcess(["train", "--task", "math_arith", "--run-dir", str(tmp_path / "run"),
                              "--ray-address", address, *SMALL])
    seen: set[str] = set()
    while process.poll() is None:
        seen |= _names(process.descendants)
        time.sleep(0.2)
    returncode, stdout, stderr = process.wait()
    assert returncode == 0, stderr[-3000:]
    assert json.loads(stdout.strip().splitlines()[-1])["iterations"] == 1
    assert not seen & {"gcs_server", "raylet"}, seen
    assert "cluster:\n  address: " + address in (tmp_path / "run" / "config.yaml").read_text()
