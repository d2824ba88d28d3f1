"""GPU slots become device isolation: each worker process sees only the GPUs of its slots."""

import sys

import pytest
import ray

from embodied_rl.runtime import Worker, WorkerGroup
from embodied_rl.runtime.worker import visible_devices

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_slots_map_to_the_gpus_the_node_exposes():
    assert visible_devices((0, 1), None) == "0,1"
    assert visible_devices((1,), "4,5,6") == "5"
    assert visible_devices((0, 2), "GPU-aa, GPU-bb, GPU-cc") == "GPU-aa,GPU-cc"
    with pytest.raises(ValueError, match=r"GPU slots \[2\] are out of range"):
        visible_devices((2,), "4,5")


class DeviceReporter(Worker):
    def visible(self):
        import os

        return os.environ.get("CUDA_VISIBLE_DEVICES")

    def cuda_devices(self):
        import torch

        return torch.cuda.device_count()


def test_a_worker_on_gpu_slots_sees_only_those_devices(cluster):
    group = WorkerGroup(DeviceReporter, "devices", 2, cpus_per_worker=0.1, gpu_slots=(1,))
    try:
        assert ray.get(group.call("visible")) == ["1", "1"]
    finally:
        group.kill()


@pytest.mark.gpu
def test_on_a_gpu_machine_the_worker_gets_exactly_one_device(cluster):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    group = WorkerGroup(DeviceReporter, "devices-gpu", 1, cpus_per_worker=0.1, gpu_slots=(0,))
    try:
        assert ray.get(group.call("cuda_devices")) == [1]
    finally:
        group.kill()


class ThreadReporter(Worker):
    def threads(self):
        import torch

        return torch.get_num_threads()


def test_a_worker_pinned_to_one_core_runs_one_torch_thread(cluster):
    # Two intra-op threads spinning on one pinned core made the actor's updates about 100x slower.
    group = WorkerGroup(ThreadReporter, "threads", 1, cpus_per_worker=0.1, cpu_slots=(0,), torch_threads=2)
    unpinned = WorkerGroup(ThreadReporter, "threads-free", 1, cpus_per_worker=0.1, torch_threads=2)
    try:
        assert ray.get(group.call("threads")) == [1]
        assert ray.get(unpinned.call("threads")) == [2]
    finally:
        group.kill()
        unpinned.kill()
