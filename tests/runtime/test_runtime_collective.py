"""Collectives among worker processes: state-dict broadcast, point-to-point, several groups per process."""

import contextlib
import sys

import pytest
import ray
import torch

from embodied_rl.runtime import Worker, WorkerGroup
from embodied_rl.runtime.collective import dissolve_collective, form_collective

# Worker classes defined here travel to Ray's worker processes by value (tests/ is not on their path).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def reference_state_dict(seed: int) -> dict[str, torch.Tensor]:
    """A tiny model's state plus buffers of other dtypes and shapes, the same for the same seed."""
    torch.manual_seed(seed)
    state = dict(torch.nn.Linear(5, 3).state_dict())  # weight [3, 5] float32, bias [3] float32
    state["steps"] = torch.arange(7, dtype=torch.int64) * 1_000_000_007
    state["mask"] = torch.rand(2, 3) > 0.5
    state["scale"] = torch.randn(4, 2, dtype=torch.bfloat16)
    state["version"] = torch.tensor(42, dtype=torch.int32)  # a 0-dim tensor
    state["transposed"] = torch.randn(3, 4).t()  # not contiguous
    return state


class CollectiveProbe(Worker):
    """A worker whose methods exercise ``self.collectives`` from inside its process."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.template: dict[str, torch.Tensor] = {}

    def backend_of(self, name: str) -> str:
        return self.collectives[name].spec.backend

    def collective_rank(self, name: str) -> int:
        return self.collectives[name].rank

    def broadcast_weights(self, name: str, src: int, seed: int | None, use_template: bool):
        """Rank ``src`` sends ``reference_state_dict(seed)``; receivers use None or a zeroed template."""
        group = self.collectives[name]
        if group.rank == src:
            return group.broadcast_state_dict(reference_state_dict(seed), src)
        if not use_template:
            return group.broadcast_state_dict(None, src)
        self.template = {key: torch.zeros_like(value) for key, value in reference_state_dict(0).items()}
        self.model = torch.nn.Linear(5, 3)
        self.template.update(self.model.named_parameters())  # parameters that require grad, written in place
        pointers = {key: value.data_ptr() for key, value in self.template.items()}
        received = group.broadcast_state_dict(self.template, src)
        assert all(received[key] is self.template[key] for key in received), "template not updated in place"
        assert pointers == {key: value.data_ptr() for key, value in received.items()}
        assert torch.equal(self.model.weight, received["weight"]) and self.model.weight.requires_grad
        return received

    def broadcast_in_buckets(self, name: str, src: int, state: dict | None, bucket_bytes: int) -> list[dict]:
        """Rank ``src`` sends ``state`` in buckets of ``bucket_bytes``; the others collect what ``on_bucket`` gets."""
        group = self.collectives[name]
        if group.rank == src:
            return [group.broadcast_state_dict(state, src, bucket_bytes=bucket_bytes)]
        buckets = []
        assert group.broadcast_state_dict(None, src, on_bucket=lambda b: buckets.append(
            {k: v.clone() for k, v in b.items()})) == {}
        return buckets

    def send_tensor(self, name: str, tensor: torch.Tensor, dst: int) -> None:
        self.collectives[name].send(tensor, dst)

    def receive_tensor(self, name: str, shape_or_template, src: int, dtype=None) -> torch.Tensor:
        return self.collectives[name].recv(shape_or_template, src, dtype=dtype)

    def broadcast_object(self, name: str, value, src: int):
        return self.collectives[name].broadcast_object(value, src)

    def barrier(self, name: str) -> None:
        self.collectives[name].barrier()


@pytest.fixture(scope="module")
def probes(cluster):
    group = WorkerGroup(CollectiveProbe, "collective-probe", 3, cpus_per_worker=0.1)
    yield group
    group.kill()


def assert_state_dicts_equal(received: dict, expected: dict) -> None:
    assert list(received) == list(expected)
    for key, value in expected.items():
        assert received[key].dtype == value.dtype, key
        assert received[key].shape == value.shape, key
        assert torch.equal(received[key], value), key


def test_rank_zero_broadcasts_a_state_dict_that_every_rank_receives_exactly(probes):
    spec = form_collective("weights", probes.workers)
    try:
        assert spec.backend == "gloo" and spec.world_size == 3  # "auto" without a GPU
        assert ray.get(probes.call("backend_of", "weights")) == ["gloo"] * 3
        futures = [probes.workers[0].broadcast_weights.remote("weights", 0, 7, False),
                   probes.workers[1].broadcast_weights.remote("weights", 0, None, False),
                   probes.workers[2].broadcast_weights.remote("weights", 0, None, True)]
        sent, received_new, received_in_template = ray.get(futures, timeout=60)
        expected = reference_state_dict(7)
        assert_state_dicts_equal(sent, expected)
        assert_state_dicts_equal(received_new, expected)
        assert_state_dicts_equal(received_in_template, expected)
        # A second broadcast, from another rank, with other values, reuses the group.
        futures = [probes.workers[rank].broadcast_weights.remote("weights", 2, 8 if rank == 2 else None, True)
                   for rank in range(3)]
        for received in ray.get(futures, timeout=60):
            assert_state_dicts_equal(received, reference_state_dict(8))
    finally:
        dissolve_collective("weights", probes.workers)


def test_a_state_dict_travels_in_buckets_of_whole_layers_handed_over_as_they_arrive(probes):
    """Buckets of at most the source's size (a larger layer alone), never splitting a ``layers.N`` block (an engine
    loads q/k/v fused); what the receivers' ``on_bucket`` got is the whole state dict, exactly."""
    torch.manual_seed(0)
    state = {"model.embed_tokens.weight": torch.randn(64, 8)}
    for layer in range(3):
        for part in ("q_proj", "k_proj", "v_proj", "mlp.up_proj"):
            state[f"model.layers.{layer}.{part}.weight"] = torch.randn(8, 8, dtype=torch.bfloat16)
    state["lm_head.weight"] = torch.randn(64, 8)
    state["version"] = torch.tensor(3)
    spec = form_collective("buckets", probes.workers)
    try:
        futures = [probes.workers[0].broadcast_in_buckets.remote("buckets", 0, state, 700)] + [
            worker.broadcast_in_buckets.remote("buckets", 0, None, 0) for worker in probes.workers[1:]]
        _, *received = ray.get(futures, timeout=60)
    finally:
        dissolve_collective("buckets", probes.workers)
    assert spec.world_size == 3
    for buckets in received:
        assert len(buckets) >= 4  # embeddings (2 KiB) alone, then layers of 512 bytes one or so at a time
        layers = [{k.split(".")[2] for k in bucket if ".layers." in k} for bucket in buckets]
        owners = [next(i for i, found in enumerate(layers) if str(layer) in found) for layer in range(3)]
        assert all(str(layer) not in found for layer, owner in enumerate(owners)
                   for i, found in enumerate(layers) if i != owner)  # every layer in one bucket
        merged = {k: v for bucket in buckets for k, v in bucket.items()}
        assert_state_dicts_equal({k: merged[k] for k in state}, state)


def test_point_to_point_send_and_receive_carry_exact_values(probes):
    form_collective("pairs", probes.workers)
    try:
        floats = torch.randn(4, 5)
        integers = torch.arange(12, dtype=torch.int64).reshape(3, 4) - 6
        sends = [probes.workers[0].send_tensor.remote("pairs", floats, 2),
                 probes.workers[1].send_tensor.remote("pairs", integers, 0)]
        into_new = probes.workers[2].receive_tensor.remote("pairs", (4, 5), 0)
        into_template = probes.workers[0].receive_tensor.remote("pairs", torch.zeros(3, 4, dtype=torch.int64), 1)
        received_floats, received_integers = ray.get([into_new, into_template], timeout=60)
        ray.get(sends, timeout=60)
        assert torch.equal(received_floats, floats)
        assert torch.equal(received_integers, integers)
        # A Python object (the metadata path) and a barrier.
        objects = ray.get(probes.call("broadcast_object", "pairs", {"version": 3}, 1), timeout=60)
        assert objects == [{"version": 3}] * 3
        ray.get(probes.call("barrier", "pairs"), timeout=60)
    finally:
        dissolve_collective("pairs", probes.workers)


def test_a_worker_belongs_to_two_groups_at_once(probes):
    everyone, pair = probes.workers, [probes.workers[2], probes.workers[0]]  # rank 0 of "pair" is worker 2
    form_collective("everyone", everyone)
    form_collective("pair", pair)
    try:
        assert ray.get([worker.collective_rank.remote("pair") for worker in pair]) == [0, 1]
        assert ray.get(probes.workers[2].collective_rank.remote("everyone")) == 2
        in_pair = ray.get([pair[0].broadcast_weights.remote("pair", 0, 11, False),
                           pair[1].broadcast_weights.remote("pair", 0, None, False)], timeout=60)
        assert_state_dicts_equal(in_pair[1], reference_state_dict(11))
        in_everyone = ray.get([everyone[rank].broadcast_weights.remote("everyone", 1, 12 if rank == 1 else None,
                                                                       False) for rank in range(3)], timeout=60)
        for received in in_everyone:
            assert_state_dicts_equal(received, reference_state_dict(12))
        with pytest.raises(ray.exceptions.RayTaskError, match="already in a collective named 'pair'"):
            ray.get(pair[1].join_collective.remote(ray.get(pair[0].open_collective.remote("pair", 2)), 1))
    finally:
        dissolve_collective("pair", pair)
        dissolve_collective("everyone", everyone)


def test_a_dissolved_group_name_can_be_formed_again(probes):
    form_collective("again", probes.workers[:2])
    dissolve_collective("again", probes.workers[:2])
    form_collective("again", probes.workers[1:])
    try:
        objects = ray.get([probes.workers[1].broadcast_object.remote("again", "hello", 0),
                           probes.workers[2].broadcast_object.remote("again", None, 0)], timeout=60)
        assert objects == ["hello", "hello"]
    finally:
        dissolve_collective("again", probes.workers[1:])


@contextlib.contextmanager
def gpu_probes(count: int):
    """``count`` probes with one GPU each (skips when the cluster has fewer); killed afterwards."""
    if torch.cuda.device_count() < count or ray.cluster_resources().get("GPU", 0) < count:
        pytest.skip(f"NCCL needs one GPU per rank: this test needs {count} GPU(s)")
    remote = ray.remote(CollectiveProbe).options(num_cpus=0.1, num_gpus=1)
    workers = [remote.remote(group="nccl-probe", rank=rank, world_size=count) for rank in range(count)]
    try:
        yield workers
    finally:
        for worker in workers:
            ray.kill(worker, no_restart=True)


@pytest.mark.gpu
def test_nccl_broadcasts_a_state_dict_and_sends_between_two_gpus(cluster):
    with gpu_probes(2) as workers:
        spec = form_collective("nccl-weights", workers, backend="auto")
        assert spec.backend == "nccl"
        received = ray.get([workers[0].broadcast_weights.remote("nccl-weights", 0, 5, False),
                            workers[1].broadcast_weights.remote("nccl-weights", 0, None, False)], timeout=120)
        expected = reference_state_dict(5)
        assert all(value.is_cuda for value in received[1].values())
        assert_state_dicts_equal({key: value.cpu() for key, value in received[1].items()}, expected)
        in_template = ray.get([workers[0].broadcast_weights.remote("nccl-weights", 0, 6, False),
                               workers[1].broadcast_weights.remote("nccl-weights", 0, None, True)], timeout=120)
        assert_state_dicts_equal(in_template[1], reference_state_dict(6))  # the template lives on the CPU
        values = torch.randn(64, 3)
        sent = workers[1].send_tensor.remote("nccl-weights", values, 0)
        got = ray.get(workers[0].receive_tensor.remote("nccl-weights", (64, 3), 1), timeout=120)
        ray.get(sent, timeout=120)
        assert got.is_cuda and torch.equal(got.cpu(), values)
        dissolve_collective("nccl-weights", workers)


@pytest.mark.gpu
def test_nccl_group_of_one_gpu_forms_and_round_trips_a_state_dict(cluster):
    with gpu_probes(1) as workers:
        assert form_collective("nccl-solo", workers, backend="nccl").backend == "nccl"
        sent = ray.get(workers[0].broadcast_weights.remote("nccl-solo", 0, 9, False), timeout=120)
        assert_state_dicts_equal(sent, reference_state_dict(9))
        assert ray.get(workers[0].broadcast_object.remote("nccl-solo", [1, "two"], 0), timeout=120) == [1, "two"]
        ray.get(workers[0].barrier.remote("nccl-solo"), timeout=120)
        dissolve_collective("nccl-solo", workers)
