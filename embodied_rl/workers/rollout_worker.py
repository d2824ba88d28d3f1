"""Rollout worker: holds an inference copy of the policy and answers env workers' requests in batches.

Between its turns on a shared device the weights are offloaded to host memory; weights loaded meanwhile go into
the host copy and reach the device at ``onload``. It refuses to serve while offloaded.
"""

from __future__ import annotations

import time

import ray
import torch

from embodied_rl.models import build_policy
from embodied_rl.models.outputs import unpack_act
from embodied_rl.runtime import Worker
from embodied_rl.runtime.channel import ChannelTimeout
from embodied_rl.runtime.offload import MoveReport, Offloader
from embodied_rl.workers.messages import (POLICY_VERSION_KEY, REQUESTS_KEY, PolicyRequest, PolicyResponse,
                                          StopServing, responses_key)
from embodied_rl.workers.weights import load_host_weights, weights_template, host_weights
from sim_envs.vector_env import stack_obs

ANSWER_READER_TIMEOUT_S = 1.0
"""How long an answer waits for its env worker's key to have a reader (it has one from the worker's start)."""


class RolloutWorker(Worker):
    """Serves ``PolicyRequest``s from the channel until it receives ``StopServing``.

    Every request already waiting is answered with one batched forward pass, so the batch grows with the
    number of env workers that are ready, and no env worker waits for the slowest one.
    """

    CONCURRENCY_GROUPS = {"heartbeat": 1}  # ``heartbeat`` answers while ``serve`` runs

    def __init__(self, policy: dict, channel, **kwargs):
        super().__init__(**kwargs)
        self.policy = build_policy(**policy).to(self.device).eval()
        self.policy_version = 0
        self.channel = channel
        self.channel.subscribe(REQUESTS_KEY)
        self.requests_served = 0
        self.forward_passes = 0
        self.answers_dropped = 0  # answers to env workers that died after asking
        self.answering = False  # inside a forward pass and its answers (``heartbeat``)
        self.offloader = Offloader([self.policy])

    def leave(self) -> None:
        """Before this worker is removed (the run scales down): no env worker sends it requests any more."""
        self.channel.unsubscribe(REQUESTS_KEY)

    def offload(self) -> MoveReport:
        """Move the weights to host memory (a no-op for memory on CPU)."""
        return self.offloader.offload()

    def onload(self) -> MoveReport:
        """Move the weights back to the device for the next sampling turn."""
        return self.offloader.onload()

    def load_weights(self, weights_and_version: tuple[dict, int]) -> int:
        """Install ``(state_dict of numpy arrays, policy version)``; returns the version."""
        state_dict, version = weights_and_version
        load_host_weights(self.policy, state_dict)
        self.policy_version = version
        return version

    def get_weights(self) -> tuple[dict, int]:
        """``(state_dict as numpy arrays, policy version)`` of the inference copy."""
        return host_weights(self.policy), self.policy_version

    def receive_weights(self, collective: str, only_trained: bool = False) -> int:
        """Receive the weights broadcast by rank 0 of ``collective`` into the policy in place (``only_trained``:
        without the frozen ones, which this copy already holds); returns the version."""
        template = weights_template(self.policy, only_trained)
        template[POLICY_VERSION_KEY] = torch.zeros((), dtype=torch.int64)
        received = self.collectives[collective].broadcast_state_dict(template, src=0)
        self.policy_version = int(received[POLICY_VERSION_KEY])
        return self.policy_version

    @ray.method(concurrency_group="heartbeat")
    def heartbeat(self) -> dict:
        """Answered from a thread of its own while ``serve`` runs (a stopped or wedged process does not answer):
        ``progress`` grows with every forward pass and answer; ``waiting``: idle, waiting for requests."""
        return {"progress": self.forward_passes + self.requests_served, "waiting": not self.answering}

    def serve(self) -> dict:
        """Answer requests until a ``StopServing`` arrives; returns counters, with the seconds spent waiting for
        requests (``waiting_s``) and answering them (``inferring_s``: forward passes and sending the answers)."""
        if self.offloader.offloaded:
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
        for r in requests:
            if r.sample_seed is not None:
                self._answer_seeded(r)
        for deterministic in (False, True):
            group = [r for r in requests if r.deterministic == deterministic and r.sample_seed is None]
            if group:
                self._answer_group(group, deterministic)

    def _answer_seeded(self, request: PolicyRequest) -> None:
        """One request in a forward pass of its own, its random draws from its own seed: the same actions whichever
        requests arrived with it (a batch's size can change the floating-point result of a forward pass)."""
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(request.sample_seed)
            self._answer_group([request], request.deterministic)

    def _answer_group(self, requests: list[PolicyRequest], deterministic: bool) -> None:
        pieces = []
        for r in requests:
            pieces.append(r.obs)
            if r.final_obs is not None:
                pieces.append(r.final_obs)
        # An array, or a dict of arrays (camera images with the proprioceptive state, and maybe the instruction)
        obs = stack_obs(pieces)
        obs = ({k: _policy_input(v, self.device) for k, v in obs.items()} if isinstance(obs, dict)
               else torch.as_tensor(obs).to(self.device))
        actions, logp, values, stored = unpack_act(self.policy.act(obs, deterministic=deterministic))
        actions, logp, values = actions.cpu().numpy(), logp.cpu().numpy(), values.cpu().numpy()
        stored = {k: v.cpu().numpy() for k, v in stored.items()} if stored else None
        self.forward_passes += 1
        offset = 0
        for r in requests:
            n = _rows(r.obs)
            k = 0 if r.final_obs is None else _rows(r.final_obs)
            rows = slice(offset, offset + n)
            response = PolicyResponse(
                actions[rows] if r.want_actions else None, logp[rows] if r.want_actions else None,
                values[rows], values[offset + n: offset + n + k], self.policy_version, self.rank,
                {key: v[rows] for key, v in stored.items()} if stored and r.want_actions else None, r.sequence)
            try:
                # An env worker subscribes before its first request: no reader means it died (its replacement
                # reads another key), so the answer is dropped at once instead of waiting for a reader.
                self.channel.put(response, responses_key(r.env_rank, r.stage, r.incarnation),
                                 timeout=ANSWER_READER_TIMEOUT_S)
            except ChannelTimeout:
                self.answers_dropped += 1
            offset += n + k
            self.requests_served += 1


def _policy_input(value, device):
    """A numeric array as a tensor on ``device``; strings (the instruction, unicode ``[B]``) stay numpy arrays."""
    return torch.as_tensor(value).to(device) if value.dtype.kind in "biufc" else value


def _rows(obs) -> int:
    return len(next(iter(obs.values()))) if isinstance(obs, dict) else len(obs)
