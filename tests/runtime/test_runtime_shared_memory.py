import os

import numpy as np

from embodied_rl.runtime.transports import shared_memory


def test_large_arrays_travel_through_dev_shm_and_small_ones_inline():
    big = np.arange(100_000, dtype=np.float32)
    small = np.arange(10, dtype=np.int64)
    payload, descriptors = shared_memory.encode({"big": big, "small": small, "text": "hi"}, threshold=1024)
    kinds = sorted(d[0] for d in descriptors)
    assert kinds == ["inline", "shm"]
    path = next(d[1] for d in descriptors if d[0] == "shm")
    assert os.path.exists(path)
    assert len(payload) < 1000  # the array bytes are not in the pickle
    decoded = shared_memory.decode(payload, descriptors)
    assert not os.path.exists(path)  # unlinked as soon as it is mapped
    np.testing.assert_array_equal(decoded["big"], big)
    np.testing.assert_array_equal(decoded["small"], small)
    assert decoded["text"] == "hi"
    decoded["big"][0] = 42.0  # the mapping is private to the receiver and writable
    assert big[0] == 0.0


def test_discard_removes_unsent_segments():
    _, descriptors = shared_memory.encode(np.zeros(50_000, np.float32), threshold=1024)
    shared_memory.discard(descriptors)
    assert not any(os.path.exists(d[1]) for d in descriptors if d[0] == "shm")
