"""Cluster start and shutdown leave nothing behind."""

import sys
import textwrap

from tests_helpers import TrackedProcess


def test_a_cluster_in_a_child_process_leaves_no_ray_daemons_behind():
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
    process = TrackedProcess([sys.executable, "-c", script], cli=False)
    returncode, stdout, stderr = process.wait(timeout=180)
    assert returncode == 0, stderr[-2000:]
    assert "ok" in stdout
    assert len(process.descendants) >= 2  # Ray's daemons and the workers were seen
    assert not process.leftovers(), "processes outlived the process that started them"
