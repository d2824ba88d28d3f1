"""The channel's CUDA IPC route on a GPU machine (run by scripts/gpu_checks.sh), with torch alone (no Ray): two
processes on one GPU exchange trajectory-sized CUDA tensors through the channel's own encoding
(``transports.encoding``: ``Encoder.encode`` -> ``pack_message`` -> frame bytes -> ``unpack_message`` ->
``Decoder.decode``), the frame bytes carried by a pipe where the channel uses a Unix socket. Each step asserted:

  the receiver's tensors are on the GPU and equal the sender's bytes; the frame holds handles, not the bytes (no
  host copy); the sender's memory stays allocated while the receiver holds the tensors (the sender dropped its own
  references) and is released after the receiver drops them (``torch.cuda.ipc_collect``); the same tensors through
  the host route (``.cpu()``, shared memory, ``.to("cuda")`` on the receiver) for the ratio of the two.

Timings: from the sender's encoding to the receiver holding the tensors on the GPU (best of ``ROUNDS``). One
PASS/FAIL line per check and the timings; exit 1 on a failure. ``PYTHONPATH=. python scripts/gpu_channel_checks.py``.
"""

from __future__ import annotations

import sys
import time
import traceback

import torch
import torch.multiprocessing as mp

from embodied_rl.runtime.transports.encoding import Decoder, Encoder, pack_message, unpack_message

SHAPES = {"observations": (256, 50, 64), "actions": (256, 50, 8), "logprobs": (256, 50), "values": (256, 51),
          "images": (64, 50, 3, 128, 128)}
"""A trajectory batch of 256 envs x 50 steps (state observations), and 64 envs' 128x128 camera frames (157 MB)."""
ROUNDS = 5


WAIT_S = 120.0
"""Bounds every wait for the other process's message."""


def receive(connection, what: str):
    """The next message on ``connection`` within ``WAIT_S``; a ``TimeoutError`` naming ``what`` after that."""
    if not connection.poll(WAIT_S):
        raise TimeoutError(f"no {what} within {WAIT_S:.0f} s")
    return connection.recv()


def trajectory(seed: int, device: str) -> dict[str, torch.Tensor]:
    generator = torch.Generator(device="cpu").manual_seed(seed)
    out = {name: torch.randn(shape, generator=generator) for name, shape in SHAPES.items() if name != "images"}
    out["images"] = torch.randint(0, 255, SHAPES["images"], generator=generator, dtype=torch.uint8)
    return {name: tensor.to(device) for name, tensor in out.items()}


def frame(item, threshold: int | None, encoder: Encoder) -> bytes:
    """``item`` as the channel's frame body (same node), joined into bytes."""
    payload, descriptors = encoder.encode(item, "receiver", threshold, same_node=True)
    return b"".join(bytes(part) for part in pack_message("bench", "data", payload, descriptors))


def receiver(connection) -> None:
    torch.cuda.init()
    decoder = Decoder()
    try:
        while True:
            message = receive(connection, "message from the sender")
            if message is None:
                return
            kind, body = message
            start = time.perf_counter()
            _, _, payload, descriptors = unpack_message(bytearray(body))
            item = decoder.decode(payload, descriptors)
            item = {k: v.to("cuda") for k, v in item.items()}  # the host route's copy in; a no-op on the IPC route
            torch.cuda.synchronize()
            connection.send(time.perf_counter() - start)  # received: the sender stops its clock here
            expected = trajectory(item.pop("seed").item(), "cuda")
            equal = all(torch.equal(item[k], expected[k]) for k in expected)
            on_gpu = all(v.is_cuda for v in item.values())
            connection.send((equal, on_gpu))
            if kind == "hold":  # keep the tensors until told to drop them
                assert receive(connection, "drop request") == "drop"
                del item
                torch.cuda.synchronize()
                connection.send("dropped")
            del expected
    finally:
        decoder.close()


def main() -> int:
    if not torch.cuda.is_available():
        print("SKIP gpu-channel: no CUDA device")
        return 0
    context = mp.get_context("spawn")
    here, there = context.Pipe()
    process = context.Process(target=receiver, args=(there,), daemon=True)
    process.start()
    encoder = Encoder("erl-gpu-check")
    failures = 0

    def check(name: str, condition: bool, detail: str) -> None:
        nonlocal failures
        print(f"{'PASS' if condition else 'FAIL'} {name}: {detail}")
        failures += not condition

    try:
        nbytes = sum(t.numel() * t.element_size() for t in trajectory(0, "cpu").values())
        baseline = torch.cuda.memory_allocated()
        item = trajectory(1, "cuda")
        item["seed"] = torch.tensor(1, device="cuda")
        body = frame(item, None, encoder)
        check("ipc-no-host-copy", len(body) < nbytes / 1000, f"frame {len(body)} bytes for {nbytes} tensor bytes")
        del item
        held = torch.cuda.memory_allocated()
        here.send(("hold", body))
        del body
        receive(here, "receipt")
        equal, on_gpu = receive(here, "comparison")
        check("ipc-bytes-equal", equal and on_gpu, f"equal={equal}, on the GPU={on_gpu}")
        torch.cuda.ipc_collect()
        kept = torch.cuda.memory_allocated()
        check("ipc-kept-while-held", kept - baseline >= nbytes,
              f"{(kept - baseline) / 2**20:.1f} MiB still allocated in the sender while the receiver holds them")
        here.send("drop")
        assert receive(here, "drop confirmation") == "dropped"
        deadline = time.monotonic() + 10
        while torch.cuda.memory_allocated() - baseline >= nbytes and time.monotonic() < deadline:
            torch.cuda.ipc_collect()
            time.sleep(0.1)
        released = torch.cuda.memory_allocated()
        check("ipc-released-after-drop", released - baseline < nbytes,
              f"{(held - baseline) / 2**20:.1f} MiB before, {(released - baseline) / 2**20:.1f} MiB after the "
              "receiver dropped them")

        timings = {}
        for route, threshold, device in (("cuda_ipc", None, "cuda"), ("host_shared_memory", 0, "cpu")):
            seconds = []
            for round_index in range(ROUNDS):
                item = trajectory(2 + round_index, "cuda")
                item["seed"] = torch.tensor(2 + round_index, device="cuda")
                torch.cuda.synchronize()
                start = time.perf_counter()
                sent = item if device == "cuda" else {k: v.cpu() for k, v in item.items()}
                body = frame(sent, threshold, encoder)
                here.send(("once", body))
                receive(here, "receipt")
                seconds.append(time.perf_counter() - start)
                equal, on_gpu = receive(here, "comparison")
                check(f"{route}-round-{round_index}", equal and on_gpu, f"equal={equal}, on the GPU={on_gpu}")
                del item, sent, body
                torch.cuda.ipc_collect()
            timings[route] = min(seconds)
        for route, seconds in timings.items():
            print(f"{route}: {seconds * 1e3:.1f} ms per trajectory of {nbytes / 1e6:.0f} MB "
                  f"({nbytes / seconds / 1e9:.2f} GB/s), best of {ROUNDS}")
        print(f"cuda_ipc over host_shared_memory: {timings['host_shared_memory'] / timings['cuda_ipc']:.2f}x")
    except Exception:
        traceback.print_exc()
        failures += 1
    finally:
        here.send(None)
        process.join(timeout=30)
        encoder.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
