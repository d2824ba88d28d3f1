import gc
import os
import pickle

import numpy as np
import pytest
import torch

from embodied_rl.runtime.transports import shared_memory
from embodied_rl.runtime.transports.encoding import Decoder, Encoder


@pytest.fixture
def ends(tmp_path):
    tag = f"erl-test-{os.getpid()}-{tmp_path.name}"
    encoder = Encoder(shared_memory.segment_prefix(tag))
    yield encoder, Decoder(), tag
    encoder.close()
    shared_memory.sweep_segments(tag)


def _segments(tag):
    prefix = os.path.basename(shared_memory.segment_prefix(tag))
    return sorted(name for name in os.listdir(shared_memory.SHM_DIR) if name.startswith(prefix))


def test_large_arrays_go_through_a_pooled_segment_and_small_ones_inline(ends):
    encoder, decoder, tag = ends
    big = np.arange(100_000, dtype=np.float32)
    small = np.arange(10, dtype=np.int64)
    payload, descriptors = encoder.encode({"big": big, "small": small, "text": "hi"}, "r", 1024, True)
    assert sorted(d[0] for d in descriptors) == ["inline", "pooled"]
    assert len(payload) < 1000  # the array bytes are not in the pickle
    assert len(_segments(tag)) == 1
    decoded = decoder.decode(payload, descriptors)
    assert _segments(tag) == []  # the receiver unlinks a segment as soon as it has mapped it
    np.testing.assert_array_equal(decoded["big"], big)
    np.testing.assert_array_equal(decoded["small"], small)
    assert decoded["text"] == "hi"
    decoded["big"][0] = 42.0  # writable, and not the sender's array
    assert big[0] == 0.0


def test_a_pooled_segment_is_reused_once_the_receiver_drops_its_arrays(ends):
    encoder, decoder, _ = ends
    payload, (first,) = encoder.encode(np.ones(50_000, np.float32), "r", 1024, True)
    received = decoder.decode(payload, [first])
    busy = encoder.encode(np.full(50_000, 2.0, np.float32), "r", 1024, True)[1][0]
    assert busy[1] != first[1]  # the first segment is still held by ``received``
    np.testing.assert_array_equal(received, 1.0)  # not overwritten by the second message
    del received
    gc.collect()
    again = encoder.encode(np.full(50_000, 3.0, np.float32), "r", 1024, True)[1][0]
    assert again[1] == first[1]
    assert len(encoder._pools["r"].segments) == 2


def test_a_full_pool_falls_back_to_one_off_segments(ends, monkeypatch):
    encoder, decoder, tag = ends
    monkeypatch.setattr(shared_memory, "POOL_BYTES_PER_RECEIVER", 0)
    encoder.forget("r")
    payload, descriptors = Encoder(shared_memory.segment_prefix(tag)).encode(np.ones(50_000), "r", 1024, True)
    assert descriptors[0][0] == "one_off"
    np.testing.assert_array_equal(decoder.decode(payload, descriptors), 1.0)
    assert _segments(tag) == []


def test_shared_arrays_travel_by_name_without_a_copy(ends):
    encoder, decoder, _ = ends
    shared = encoder.shared_arrays.empty((1000, 50), np.float32)
    shared[:] = 7.0
    payload, descriptors = encoder.encode(shared[10:20], "r", 1024, True)
    assert descriptors[0][0] == "shared" and len(payload) < 1000
    received = decoder.decode(payload, descriptors)
    np.testing.assert_array_equal(received, 7.0)
    shared[10, 0] = -1.0  # one memory: the receiver sees the sender's writes
    assert received[0, 0] == -1.0


def test_torch_tensors_travel_out_of_band_with_their_dtype(ends):
    encoder, decoder, _ = ends
    tensors = {"f": torch.arange(100_000, dtype=torch.float32), "bf16": torch.ones(40_000, dtype=torch.bfloat16),
               "param": torch.nn.Parameter(torch.zeros(30_000))}
    payload, descriptors = encoder.encode(tensors, "r", 1024, True)
    assert len(payload) < 2000 and [d[0] for d in descriptors] == ["pooled"] * 3
    received = decoder.decode(payload, descriptors)
    for name, tensor in tensors.items():
        assert received[name].dtype == tensor.dtype
        assert torch.equal(received[name], tensor.detach())


def test_socket_only_sends_every_byte_inline(ends):
    encoder, decoder, tag = ends
    payload, descriptors = encoder.encode(np.ones(100_000), "r", None, True)
    assert [d[0] for d in descriptors] == ["inline"] and _segments(tag) == []
    np.testing.assert_array_equal(decoder.decode(payload, descriptors), 1.0)


def test_a_failed_send_frees_its_pooled_segment_and_removes_one_off_files(ends, monkeypatch):
    encoder, _, tag = ends
    _, descriptors = encoder.encode(np.zeros(50_000, np.float32), "r", 1024, True)
    encoder.discard("r", descriptors)
    assert encoder._pools["r"].segments[0].free
    monkeypatch.setattr(shared_memory, "POOL_BYTES_PER_RECEIVER", 0)
    _, descriptors = Encoder(shared_memory.segment_prefix(tag)).encode(np.zeros(50_000), "s", 1024, True)
    encoder.discard("s", descriptors)
    assert not os.path.exists(descriptors[0][1])


def test_sweep_removes_what_a_crashed_sender_left(ends):
    encoder, _, tag = ends
    encoder.encode(np.zeros(50_000, np.float32), "r", 1024, True)
    encoder.shared_arrays.empty((10,))
    assert len(_segments(tag)) == 2
    assert shared_memory.sweep_segments(tag) == 2 and _segments(tag) == []


@pytest.mark.gpu
def test_cuda_tensors_on_one_node_travel_as_ipc_handles(ends):
    if not torch.cuda.is_available():
        pytest.skip("CUDA IPC needs a CUDA device; this machine has none")
    encoder, _, _ = ends
    tensor = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    payload, descriptors = encoder.encode(tensor, "r", 1024, True)
    assert descriptors == [] and len(payload) < 4096  # a handle, not 4 MB of bytes
    assert b"rebuild_cuda_tensor" in payload
    remote_payload, remote_descriptors = encoder.encode(tensor, "r", 1024, False)
    assert [d[0] for d in remote_descriptors] == ["pooled"]  # another node: host bytes
    rebuilt = pickle.loads(remote_payload, buffers=[Decoder().segments.buffer(d) for d in remote_descriptors])
    assert rebuilt.is_cuda and torch.equal(rebuilt, tensor)


def test_resending_a_received_array_does_not_keep_its_segment_busy(ends):
    encoder, decoder, _ = ends
    forwarder = Encoder(encoder.segment_prefix + "fwd-")
    try:
        payload, (descriptor,) = encoder.encode(np.ones(50_000, np.float32), "r", 1024, True)
        received = decoder.decode(payload, [descriptor])
        forwarder.encode(received, "next", 1024, True)  # forwarded, as a relay would
        del received  # no garbage collection: freeing must not wait for the cyclic collector
        assert encoder._pools["r"].segments[0].free
    finally:
        forwarder.close()


def test_a_full_pool_makes_the_sender_wait_until_the_receiver_releases_a_segment(ends, monkeypatch):
    import threading
    import time

    encoder, decoder, _ = ends
    segment_size = shared_memory.DATA_OFFSET + (1 << 18)  # 50,000 float32 round up to 256 KiB
    monkeypatch.setattr(shared_memory, "POOL_BYTES_PER_RECEIVER", 2 * segment_size)
    held = [decoder.decode(*encoder.encode(np.full(50_000, i, np.float32), "r", 1024, True)) for i in range(2)]
    released = threading.Timer(0.3, held.pop, args=(0,))
    released.start()
    start = time.monotonic()
    _, (descriptor,) = encoder.encode(np.zeros(50_000, np.float32), "r", 1024, True)
    waited = time.monotonic() - start
    released.join()
    assert descriptor[0] == "pooled" and waited >= 0.25  # it waited for the release, then reused the segment
    assert len(encoder._pools["r"].segments) == 2
    np.testing.assert_array_equal(held[0], 1.0)  # the message still held is untouched

    monkeypatch.setattr(shared_memory, "POOL_WAIT_S", 0.1)  # a receiver that never lets go
    _, (fallback,) = encoder.encode(np.zeros(50_000, np.float32), "r", 1024, True)
    assert fallback[0] == "one_off"
    shared_memory.discard_one_off_segments([fallback])
