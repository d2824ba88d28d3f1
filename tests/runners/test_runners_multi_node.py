"""Two Ray nodes on one machine (Ray's own cluster test utility): components on different nodes train, and the
channel picks TCP across the node boundary and a Unix socket within a node."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

SCRIPT = textwrap.dedent("""
    import json, ray
    from ray.cluster_utils import Cluster as RayTestCluster
    from embodied_rl.config import load_train_config
    from embodied_rl.runners.setup import start_workers
    from embodied_rl.runtime import Cluster
    from embodied_rl.workers.messages import REQUESTS_KEY, TRAJECTORIES_KEY, responses_key

    nodes = RayTestCluster(initialize_head=True, head_node_args={"num_cpus": 4})
    nodes.add_node(num_cpus=4)
    nodes.wait_for_nodes()
    config = load_train_config("maniskill_pushcube", None, [
        "env.num_workers=2", "env.envs_per_worker=2", "rollout.steps_per_iteration=20",
        "algorithm.num_minibatches=4", "policy.hidden_sizes=[32]"])
    config.placement.nodes = {"env": "1", "rollout": "0", "actor": "0"}
    with Cluster(address=nodes.address) as cluster:
        workers = start_workers(config, cluster)
        env_nodes = set(ray.get(workers.env.call("node_id")))
        learner_nodes = set(ray.get(workers.rollout.call("node_id") + workers.actor.call("node_id")))
        workers.form_weight_broadcast()
        losses = []
        for _ in range(2):
            workers.sample(20)
            metrics = ray.get(workers.actor.call("update", len(workers.env))[0])
            losses.append(metrics["train/policy_loss"])
            version = workers.broadcast_weights()
        across = ray.get(workers.env.workers[0].__ray_call__.remote(
            lambda self: self.channel.transport_to_readers(REQUESTS_KEY)))
        within = ray.get(workers.env.workers[0].__ray_call__.remote(
            lambda self: [self.channel.transport_to_readers(responses_key(r, 0)) for r in range(2)]))
        traffic = ray.get(workers.env.workers[0].__ray_call__.remote(lambda self: self.channel.traffic()))
        workers.shutdown()
    print(json.dumps(dict(env_nodes=sorted(env_nodes), learner_nodes=sorted(learner_nodes), version=version,
                          losses=losses, across=across, within=within, traffic=traffic)))
    ray.shutdown()
    nodes.shutdown()
""")


@pytest.mark.slow
def test_training_across_two_nodes_uses_tcp_across_and_unix_sockets_within():
    # Both nodes advertise 127.0.0.1, so cross-node TCP traffic stays on the loopback interface.
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(report["env_nodes"]) == 1 and len(report["learner_nodes"]) == 1
    assert report["env_nodes"] != report["learner_nodes"]
    assert report["version"] == 2 and all(isinstance(x, float) for x in report["losses"])
    assert set(report["across"].values()) == {"tcp"}  # env worker (node 1) -> rollout worker (node 0)
    assert all(set(readers.values()) == {"unix_socket"} for readers in report["within"])  # env -> env node
    assert report["traffic"]["tcp_messages"] > 0
