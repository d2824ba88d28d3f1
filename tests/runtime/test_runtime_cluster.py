"""Cluster start and shutdown leave nothing behind."""

import subprocess
import sys
import textwrap
import time

from tests_helpers import ray_daemons_now


def test_a_cluster_in_a_child_process_leaves_no_ray_daemons_behind():
    before = ray_daemons_now()
    script = textwrap.dedent("""
        from embodied_rl.runtime import Cluster, Worker, WorkerGroup
        import ray, os
        with Cluster(num_cpus=1) as cluster:
            group = WorkerGroup(Worker, "w", 2, cpus_per_worker=0.25)
            assert ray.get(group.call("ping")) == ["w:0", "w:1"]
            assert os.path.isdir(cluster.session_dir)
        assert not os.path.exists(cluster.session_dir)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ok" in done.stdout
    deadline = time.time() + 20
    while ray_daemons_now() - before and time.time() < deadline:
        time.sleep(0.5)
    assert not (ray_daemons_now() - before), "Ray daemons outlived the process that started them"
