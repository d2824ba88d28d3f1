"""Rollout worker: holds an inference copy of the policy and answers env workers' requests in batches.

Between its turns on a shared device the weights are offloaded to host memory; weights loaded meanwhile go into
the host copy and reach the device at ``onload``. It refuses to serve while offloaded.
"""

from __future__ import annotations

import time

import ray

from embodied_rl.runtime import Worker
from embodied_rl.runtime.channel import ChannelTimeout
from embodied_rl.workers.messages import REQUESTS_KEY, PolicyRequest, StopServing, responses_key
from embodied_rl.workers.policy_server import PolicyHolder, PolicyServer

ANSWER_READER_TIMEOUT_S = 1.0
"""How long an answer waits for its env worker's key to have a reader (it has one from the worker's start)."""


class RolloutWorker(PolicyHolder, Worker):
    """Serves ``PolicyRequest``s from the channel until it receives ``StopServing``.

    Every request already waiting is answered with one batched forward pass, so the batch grows with the
    number of env workers that are ready, and no env worker waits for the slowest one.
    """

    CONCURRENCY_GROUPS = {"heartbeat": 1}  # ``heartbeat`` answers while ``serve`` runs

    def __init__(self, policy: dict, channel, **kwargs):
        super().__init__(**kwargs)
        self.server = PolicyServer(policy, self.device, self.rank)
        self.channel = channel
        self.channel.subscribe(REQUESTS_KEY)
        self.requests_served = 0
        self.answers_dropped = 0  # answers to env workers that died after asking
        self.answering = False  # inside a forward pass and its answers (``heartbeat``)

    @property
    def forward_passes(self) -> int:
        return self.server.forward_passes

    def leave(self) -> None:
        """Before this worker is removed (the run scales down): no env worker sends it requests any more."""
        self.channel.unsubscribe(REQUESTS_KEY)

    @ray.method(concurrency_group="heartbeat")
    def heartbeat(self) -> dict:
        """Answered from a thread of its own while ``serve`` runs (a stopped or wedged process does not answer):
        ``progress`` grows with every forward pass and answer; ``waiting``: idle, waiting for requests."""
        return {"progress": self.forward_passes + self.requests_served, "waiting": not self.answering}

    def serve(self) -> dict:
        """Answer requests until a ``StopServing`` arrives; returns counters, with the seconds spent waiting for
        requests (``waiting_s``) and answering them (``inferring_s``: forward passes and sending the answers)."""
        if self.server.offloader.offloaded:
            raise RuntimeError(f"rollout worker {self.address} cannot serve while offloaded; call onload() first "
                               "(in its turn on the device)")
        stop = False
        waiting = inferring = 0.0
        while not stop:
            requests = []
            start = time.perf_counter()
            for item in self.channel.get_batch(REQUESTS_KEY):
                if isinstance(item, StopServing):
                    stop = True
                else:
                    requests.append(item)
            received = time.perf_counter()
            if requests:
                self.answering = True
                self._answer(requests)
                self.answering = False
            waiting += received - start
            inferring += time.perf_counter() - received
        return dict(requests=self.requests_served, forward_passes=self.forward_passes, waiting_s=waiting,
                    inferring_s=inferring, answers_dropped=self.answers_dropped)

    def _answer(self, requests: list[PolicyRequest]) -> None:
        for request, response in zip(requests, self.server.answer(requests)):
            try:
                # An env worker subscribes before its first request: no reader means it died (its replacement
                # reads another key), so the answer is dropped at once instead of waiting for a reader.
                self.channel.put(response, responses_key(request.env_rank, request.stage, request.incarnation),
                                 timeout=ANSWER_READER_TIMEOUT_S)
            except ChannelTimeout:
                self.answers_dropped += 1
            self.requests_served += 1
