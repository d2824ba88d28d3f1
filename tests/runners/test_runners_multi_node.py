"""Two Ray nodes on one machine (Ray's own cluster test utility): components on different nodes train, and the
channel picks TCP across the node boundary and a Unix socket within a node, and its collective route sends tensors
across on a gloo pair; a text run's workers go to the nodes
``placement.nodes`` names, its sampled rounds crossing to the trainer on its channel."""

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
    from embodied_rl.runtime import Channel, Cluster
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
        # tensors across the nodes: env worker (node 1) -> rollout worker (node 0), on a collective channel and
        # on a default (auto) one
        import torch
        def send_bulk(self, channel):  # returns what these puts added to the process's traffic counters
            before = channel.traffic()
            for i in range(2):
                channel.put({"tensor": torch.arange(300_000, dtype=torch.float32) + i, "small": i}, "bulk")
            added = {k: v - before.get(k, 0) for k, v in channel.traffic().items()}
            return added, list(channel.transport_to_readers("bulk").values())
        def subscribe(self, channel):
            channel.subscribe("bulk")
            return ray.get_runtime_context().get_node_id()
        def take(self, channel):
            items = [channel.get("bulk", timeout=120) for _ in range(2)]
            return all(torch.equal(item["tensor"], torch.arange(300_000, dtype=torch.float32) + item["small"])
                       for item in items) and sorted(item["small"] for item in items) == [0, 1]
        sender, reader = workers.env.workers[0], workers.rollout.workers[0]
        routes = {}
        for transport in ("collective", "auto"):
            channel = Channel.create(f"bulk-{transport}", cluster, transport=transport)
            reader_node = ray.get(reader.__ray_call__.remote(subscribe, channel))
            added, route = ray.get(sender.__ray_call__.remote(send_bulk, channel))
            sender_node = ray.get(sender.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))
            equal = ray.get(reader.__ray_call__.remote(take, channel))
            routes[transport] = dict(traffic=added, route=route, equal=equal, across=reader_node != sender_node)
        # a 40 MB trajectory of torch tensors (bf16 actions) across on the collective channel
        from embodied_rl.workers.messages import Trajectory
        def trajectory(T=100, b=100, D=1000):
            steps = lambda dtype: torch.arange(T * b, dtype=dtype).reshape(T, b)
            return Trajectory(obs=torch.arange(T * b * D, dtype=torch.float32).reshape(T, b, D),
                              actions=torch.linspace(-1, 1, T * b * 8).reshape(T, b, 8).to(torch.bfloat16),
                              logp=steps(torch.float32), values=steps(torch.float32), rewards=steps(torch.float32),
                              terminated=steps(torch.int64) % 7 == 0, truncated=steps(torch.int64) % 5 == 0,
                              success=steps(torch.int64) % 3 == 0, final_values=steps(torch.float32),
                              next_value=torch.ones(b), policy_versions=torch.arange(T), env_rank=1)
        def send_trajectory(self, channel):
            before = channel.traffic()
            channel.put(trajectory(), "trajectory", timeout=120)
            return channel.traffic().get("point_to_point_bytes", 0) - before.get("point_to_point_bytes", 0)
        def take_trajectory(self, channel):
            got, want = channel.get("trajectory", timeout=120), trajectory()
            fields = [k for k, v in vars(want).items() if isinstance(v, torch.Tensor)]
            return dict(tensors=all(isinstance(getattr(got, k), torch.Tensor) for k in fields),
                        dtypes={k: str(getattr(got, k).dtype) for k in fields},
                        equal=all(torch.equal(getattr(got, k), getattr(want, k)) for k in fields),
                        obs_bytes=got.obs.numel() * got.obs.element_size())
        channel = Channel.create("trajectory-collective", cluster, transport="collective")
        ray.get(reader.__ray_call__.remote(lambda self, c: c.subscribe("trajectory"), channel))
        p2p_bytes = ray.get(sender.__ray_call__.remote(send_trajectory, channel))
        routes["trajectory"] = dict(ray.get(reader.__ray_call__.remote(take_trajectory, channel)),
                                    point_to_point_bytes=p2p_bytes)
        workers.shutdown()
    embodied = dict(env_nodes=sorted(env_nodes), learner_nodes=sorted(learner_nodes), version=version,
                    losses=losses, across=across, within=within, traffic=traffic,
                    routes=routes)

    from embodied_rl.config.reasoning import load_reasoning_config
    from embodied_rl.runners.reasoning import ReasoningRunner

    class Watched(ReasoningRunner):  # where each group's workers run, and the generation worker's channel traffic
        def iteration_metrics(self, metrics):
            ask = lambda group, f: ray.get([w.__ray_call__.remote(f) for w in group.workers])
            node = lambda worker: ray.get_runtime_context().get_node_id()
            self.seen = dict(env=ask(self.workers.env_group, node), generation=ask(self.workers.generation, node),
                             actor=ask(self.workers.actor, node),
                             traffic=ask(self.workers.generation, lambda worker: worker.channel.traffic()))
            return super().iteration_metrics(metrics)

    text = load_reasoning_config("math_arith", None, [
        "env.count=50", "env.heldout_count=4", "sft.steps=0", "rl.iterations=2", "rl.prompts_per_iteration=2",
        "algorithm.group_size=2", "eval.num_problems=2", "rollout.max_new_tokens=2", "torch_threads=1",
        f"cluster.address={nodes.address}", "placement.nodes={'env': '0', 'rollout': '1', 'actor': '0'}"])
    import tempfile
    runner = Watched(text, tempfile.mkdtemp())
    runner.run()
    rows = [json.loads(line) for line in open(runner.run_dir / "metrics.jsonl")]
    order = [n["NodeID"] for n in sorted((n for n in ray.nodes() if n["Alive"]),
                                        key=lambda n: (not n.get("IsHeadNode", False), n["NodeID"]))]
    seen = {k: [order.index(n) for n in v] if k != "traffic" else v for k, v in runner.seen.items()}
    received = sum(row.get("channel/text_parts_received", 0) for row in rows)
    print(json.dumps(dict(embodied=embodied, text=dict(seen=seen, received=received))))
    ray.shutdown()
    nodes.shutdown()
""")


@pytest.fixture(scope="module")
def two_node_report():
    # Both nodes advertise 127.0.0.1, so cross-node TCP traffic stays on the loopback interface.
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_training_across_two_nodes_uses_tcp_across_and_unix_sockets_within(two_node_report):
    report = two_node_report["embodied"]
    assert len(report["env_nodes"]) == 1 and len(report["learner_nodes"]) == 1
    assert report["env_nodes"] != report["learner_nodes"]
    assert report["version"] == 2 and all(isinstance(x, float) for x in report["losses"])
    # env worker (node 1) -> rollout worker (node 0): frames on TCP, arrays of 1 MiB and more on a gloo pair
    assert set(report["across"].values()) == {"tcp+gloo_point_to_point"}
    assert all(set(readers.values()) == {"unix_socket"} for readers in report["within"])  # env -> env node
    assert report["traffic"]["tcp_messages"] > 0


@pytest.mark.slow
def test_tensors_cross_nodes_on_a_gloo_pair_through_collective_and_auto_channels(two_node_report):
    """Env worker (node 1) -> rollout worker (node 0): the frames cross on TCP, the 1.2 MB tensors on the pair's
    gloo group (under ``auto`` too: above its 1 MiB threshold across nodes), and arrive whole; a 40 MB trajectory
    of torch tensors arrives as tensors of the same dtypes (bf16, bool), equal."""
    routes = two_node_report["embodied"]["routes"]
    trajectory = routes.pop("trajectory")  # a 40 MB trajectory of torch tensors on the collective channel
    assert trajectory["tensors"] and trajectory["equal"] and trajectory["obs_bytes"] == 40_000_000
    assert trajectory["dtypes"]["actions"] == "torch.bfloat16" and trajectory["dtypes"]["success"] == "torch.bool"
    assert trajectory["point_to_point_bytes"] >= 40_000_000
    assert routes["collective"]["route"] == ["gloo_point_to_point"]
    assert routes["auto"]["route"] == ["tcp+gloo_point_to_point"]
    for route in routes.values():
        assert route["across"] and route["equal"]
        assert route["traffic"]["point_to_point_buffers"] == 2
        assert route["traffic"]["point_to_point_bytes"] == 2 * 300_000 * 4
        assert route["traffic"]["tcp_messages"] >= 2 and route["traffic"]["tcp_bytes"] < 10_000  # frames alone


@pytest.mark.slow
def test_a_text_run_places_its_workers_by_node_and_sends_rounds_across_on_its_channel(two_node_report):
    text = two_node_report["text"]
    assert text["seen"]["env"] == [0] and text["seen"]["generation"] == [1] and text["seen"]["actor"] == [0]
    # the generation worker (node 1) sent each of its rounds to the trainer (node 0) over TCP
    assert text["received"] == 2 and text["seen"]["traffic"][0]["tcp_messages"] >= 2
