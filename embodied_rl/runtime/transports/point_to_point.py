"""The collective route of a channel: large buffers as torch.distributed point-to-point sends on a group of two
(sender, receiver), formed for each connection the first time it carries one.

The frame still travels on the connection's socket (Unix or TCP: it names the channel, key and pickle); each of
its buffers of at least the channel's threshold is described there as ``("p2p", nbytes)`` and its bytes follow on
the pair's group, in the frame's order, right after the frame (``send_buffers`` / ``receive_buffers``). gloo
carries host buffers (on CPU it stands in for NCCL, which would carry device buffers between GPUs that cannot
share memory; this module sends host bytes only).

Forming a pair (``PAIR_FRAME``): the sender opens a rendezvous store on its node (``collective.open_rendezvous``),
sends its spec as a control frame on the connection, and joins as rank 0; the receiver's connection thread joins as
rank 1 when it reads that frame. Both joins end in a barrier, so a pair is whole before the first buffer goes. The
group lives as long as the connection: the sender destroys it when it forgets the receiver, the receiver when the
connection ends. The gloo connections are not authenticated (the socket frames are): like the weight-broadcast
groups, they trust the cluster's network.
"""

from __future__ import annotations

import itertools
import os
import pickle
import warnings

PAIR_FRAME = "__point_to_point_pair__"
"""The channel name of the control frame that forms a pair."""
PAIR_TIMEOUT_S = 120.0
"""Bounds forming a pair and every send or receive on it (a receiver that died mid-transfer fails the send)."""

_PAIRS = itertools.count()


def open_pair(node_tag: str):
    """Sender side, before its first buffer: ``(spec, frame payload)``; send the payload as a ``PAIR_FRAME``, then
    ``join_sender(spec)``."""
    from embodied_rl.runtime.collective import open_rendezvous

    spec = open_rendezvous(f"p2p/{node_tag}/{os.getpid()}/{next(_PAIRS)}", 2, "gloo", PAIR_TIMEOUT_S)
    return spec, pickle.dumps(spec)


def join_sender(spec):
    from embodied_rl.runtime.collective import join

    return join(spec, 0)


def join_receiver(payload: bytes):
    """Receiver side, on a ``PAIR_FRAME``: the group (rank 1) the frame's sender opened."""
    from embodied_rl.runtime.collective import join

    return join(pickle.loads(payload), 1)


def as_bytes_tensor(view: memoryview):
    """A uint8 tensor on ``view``'s memory (no copy; gloo only reads it)."""
    import torch

    with warnings.catch_warnings():  # a read-only buffer: torch warns that writes would be undefined
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(view.cast("B"), dtype=torch.uint8) if view.nbytes else torch.empty(0, dtype=torch.uint8)


def send_buffers(group, views: list[memoryview]) -> int:
    """Send each buffer to rank 1 of ``group`` in order; returns the bytes sent. Raises ``ConnectionError`` when
    the receiver is gone or takes nothing within ``PAIR_TIMEOUT_S``."""
    sent = 0
    for view in views:
        try:
            group.send(as_bytes_tensor(view), dst=1)
        except RuntimeError as error:  # gloo's own errors: a closed peer, a timeout
            raise ConnectionError(f"point-to-point send of {view.nbytes} bytes failed: {error}") from error
        sent += view.nbytes
    return sent


def receive_buffers(group, descriptors: list) -> list:
    """``descriptors`` with each ``("p2p", nbytes)`` replaced by ``("inline", view)`` of the bytes received from
    rank 0 of ``group`` (in order); the others as they are."""
    import torch

    out = []
    for descriptor in descriptors:
        if descriptor[0] != "p2p":
            out.append(descriptor)
            continue
        buffer = group.recv((descriptor[1],), src=0, dtype=torch.uint8)
        out.append(("inline", memoryview(buffer.numpy())))
    return out
