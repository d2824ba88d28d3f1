"""``embodied-rl bench channel``: bandwidth and latency between two workers, per transport.

For 1 KB, 1 MB, 10 MB and 100 MB float32 arrays, in one run: a plain in-process copy (the reference), the channel
over its socket alone (a Unix socket on one node, TCP across two), the channel with shared memory (the sender
copies each array once into a reused segment), the channel sending an array that already lives in shared memory
(``Channel.shared_array``: only its name travels), the channel's collective route (the frame on the socket, the
array as a gloo point-to-point send on the pair's group), and Ray's object store (``ray.put`` in the sender,
``ray.get`` in the receiver). The receiver touches one value per 4 KiB page of every array it gets, so lazily
mapped memory is paid for like copied memory.

``--nodes 2``: two local Ray nodes (Ray's own cluster test utility), the sender on the head and the receiver on
the other: every route but the in-process copy crosses the node boundary (shared memory does not apply).
"""

from __future__ import annotations

import json
import time

import numpy as np
import ray

from embodied_rl.bench import require_at_least_one
from embodied_rl.config.errors import ConfigError
from embodied_rl.runtime import Channel, Cluster, Worker, WorkerGroup

SIZES = {"1KB": 1 << 10, "1MB": 1 << 20, "10MB": 10 << 20, "100MB": 100 << 20}


def _touch(array: np.ndarray) -> float:
    flat = array.reshape(-1).view(np.uint8)
    return float(flat[::4096].sum())


class ChannelBenchWorker(Worker):
    """Rank 0 sends, rank 1 receives."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.arrays: dict[int, np.ndarray] = {}

    def _array(self, nbytes: int) -> np.ndarray:
        if nbytes not in self.arrays:
            self.arrays[nbytes] = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
        return self.arrays[nbytes]

    def subscribe(self, channel: Channel, key: str) -> bool:
        channel.subscribe(key)
        return True

    def send(self, channel: Channel, key: str, nbytes: int, count: int, by_reference: bool = False) -> float:
        array = self._array(nbytes)
        if by_reference:
            shared = channel.shared_array(array.shape, array.dtype)
            shared[:] = array
            array = shared
        start = time.time()
        for _ in range(count):
            channel.put(array, key)
        return start

    def receive(self, channel: Channel, key: str, count: int) -> float:
        for _ in range(count):
            _touch(channel.get(key))
        return time.time()

    def round_trips(self, channel: Channel, key: str, reply_key: str, count: int, nbytes: int) -> float:
        """``count`` timed round trips (after one warm-up) of an ``nbytes`` array with the receiver's ``pong``;
        returns seconds per one-way trip."""
        array = self._array(nbytes)
        channel.put(array, key)  # warm-up: both sides create and map their shared-memory segments once
        channel.get(reply_key)
        start = time.perf_counter()
        for _ in range(count):
            channel.put(array, key)
            channel.get(reply_key)
        return (time.perf_counter() - start) / (2 * count)

    def pong(self, channel: Channel, key: str, reply_key: str, count: int) -> bool:
        for _ in range(count):
            channel.put(channel.get(key), reply_key)
        return True

    def put_objects(self, nbytes: int, count: int) -> tuple[float, list]:
        array = self._array(nbytes)
        start = time.time()
        return start, [ray.put(array) for _ in range(count)]

    def get_objects(self, refs: list) -> float:
        for ref in refs:
            _touch(ray.get(ref[0], timeout=CALL_TIMEOUT_S))
        return time.time()

    def copy_in_process(self, nbytes: int, count: int) -> float:
        array = self._array(nbytes)
        out = np.zeros_like(array)
        np.copyto(out, array)  # fault the destination's pages in first: the reference is a copy into warm memory
        start = time.perf_counter()
        for _ in range(count):
            np.copyto(out, array)
            _touch(out)
        return time.perf_counter() - start


CALL_TIMEOUT_S = 300.0
"""Bounds every wait on a bench worker (a 100 MB round of 8 messages takes seconds)."""


def _wait(refs, what: str):
    """``ray.get(refs)`` within ``CALL_TIMEOUT_S``; a ``TimeoutError`` naming ``what`` after that."""
    try:
        return ray.get(refs, timeout=CALL_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise TimeoutError(f"bench channel: {what} did not finish within {CALL_TIMEOUT_S:.0f} s") from None


def _count(nbytes: int) -> int:
    return max(8, min(300, (400 << 20) // max(nbytes, 1) // 4))


def parse_sizes(text: str | None) -> dict[str, int]:
    """``--sizes`` (a comma list of ``SIZES`` labels, e.g. ``1KB,1MB``; None: all) as ``{label: bytes}``."""
    if text is None:
        return dict(SIZES)
    labels = [label.strip() for label in text.split(",") if label.strip()]
    unknown = [label for label in labels if label not in SIZES]
    if unknown or not labels:
        raise ConfigError(f"--sizes={text!r}; allowed: a comma list of {', '.join(SIZES)}")
    return {label: SIZES[label] for label in labels}


def run_channel_bench(as_json: bool, repeats: int = 2, sizes: str | None = None, nodes: int = 1) -> int:
    require_at_least_one(repeats=repeats)
    if nodes not in (1, 2):
        raise ConfigError(f"--nodes={nodes}; allowed: 1, 2")
    measured_sizes = parse_sizes(sizes)
    results: dict = {"nodes": nodes, "sizes": {}}
    test_nodes = None
    if nodes == 2:
        from ray.cluster_utils import Cluster as RayTestCluster

        test_nodes = RayTestCluster(initialize_head=True, head_node_args={"num_cpus": 2})
        test_nodes.add_node(num_cpus=2)
        test_nodes.wait_for_nodes()
    try:
        address, num_cpus = (test_nodes.address, None) if test_nodes else (None, 2)
        with Cluster(address=address, num_cpus=num_cpus) as cluster:
            results["sizes"] = _measure(cluster, measured_sizes, repeats, nodes)
    finally:
        if test_nodes is not None:
            ray.shutdown()  # the driver leaves before its nodes go
            test_nodes.shutdown()
    if as_json:
        print(json.dumps(results))
    else:
        for label, row in results["sizes"].items():
            print(f"{label}: {json.dumps(row)}")
    return 0


def _measure(cluster, measured_sizes: dict[str, int], repeats: int, nodes: int) -> dict:
    node_ids = None
    if nodes == 2:
        alive = sorted((n for n in ray.nodes() if n["Alive"]), key=lambda n: (not n.get("IsHeadNode", False),
                                                                             n["NodeID"]))
        node_ids = [alive[0]["NodeID"], alive[1]["NodeID"]]
    group = WorkerGroup(ChannelBenchWorker, "channel-bench", 2, cpus_per_worker=0.5, node_ids=node_ids)
    sender, receiver = group.workers
    socket_name = "tcp" if nodes == 2 else "socket"
    routes = [(socket_name, "socket"), ("gloo_point_to_point", "collective")]
    if nodes == 1:
        routes.insert(1, ("shared_memory", "auto"))
    channels = {name: Channel.create(f"bench-{name}", cluster, transport=transport) for name, transport in routes}
    by_reference = {"shared_memory_by_reference": channels["shared_memory"]} if nodes == 1 else {}
    for channel in channels.values():
        _wait([receiver.subscribe.remote(channel, "data"), sender.subscribe.remote(channel, "reply")], "subscribing")
    rows = {}
    for label, nbytes in measured_sizes.items():
        count = _count(nbytes)
        best: dict[str, float] = {}
        for _ in range(repeats):
            elapsed = {"in_process_copy": _wait(sender.copy_in_process.remote(nbytes, count), "the copy")}
            for name, channel in [*channels.items(), *by_reference.items()]:
                receiving = receiver.receive.remote(channel, "data", count)
                start = _wait(sender.send.remote(channel, "data", nbytes, count, name in by_reference), f"{name} sends")
                elapsed[name] = _wait(receiving, f"{name} receives") - start
            start, refs = _wait(sender.put_objects.remote(nbytes, count), "ray.put")
            elapsed["ray_object_store"] = _wait(receiver.get_objects.remote([[r] for r in refs]), "ray.get") - start
            del refs
            for name, seconds in elapsed.items():
                best[name] = min(best.get(name, float("inf")), seconds)
        bandwidth = {name: nbytes * count / seconds / 1e9 for name, seconds in best.items()}
        latency = {}
        for name, channel in channels.items():
            pings = min(count, 50)
            ponging = receiver.pong.remote(channel, "data", "reply", pings + 1)
            trips = sender.round_trips.remote(channel, "data", "reply", pings, nbytes)
            latency[name] = _wait(trips, f"{name} round trips")
            _wait(ponging, f"{name} replies")
        ratio = lambda a, b: round(bandwidth[a] / bandwidth[b], 3)  # noqa: E731
        row = {"messages": count, "bandwidth_GBps": {k: float(f"{v:.4g}") for k, v in bandwidth.items()},
               "one_way_latency_ms": {k: round(v * 1e3, 3) for k, v in latency.items()}}
        if nodes == 1:
            row.update({"shared_memory_over_in_process_copy": ratio("shared_memory", "in_process_copy"),
                        "shared_memory_over_ray_object_store": ratio("shared_memory", "ray_object_store"),
                        "by_reference_over_ray_object_store": ratio("shared_memory_by_reference", "ray_object_store"),
                        "gloo_point_to_point_over_shared_memory": ratio("gloo_point_to_point", "shared_memory")})
        row.update({f"{socket_name}_over_ray_object_store": ratio(socket_name, "ray_object_store"),
                    f"gloo_point_to_point_over_{socket_name}": ratio("gloo_point_to_point", socket_name)})
        rows[label] = row
    group.kill()
    return rows
