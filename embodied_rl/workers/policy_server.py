"""The inference copy of a policy and how it answers env workers' requests, in whichever process holds it: a rollout
worker (requests from the channel, answers back on it) or an env worker that runs its own policy inline
(``rollout.inline``: no channel, no process switch between a simulator step and its action).

``PolicyHolder`` is the weight side both share: versions, loading published weights, receiving a broadcast,
moving the weights off and onto the device between turns.
"""

from __future__ import annotations

import torch

from embodied_rl.models import build_policy
from embodied_rl.models.outputs import unpack_act
from embodied_rl.runtime.offload import MoveReport, Offloader
from embodied_rl.workers.messages import POLICY_VERSION_KEY, PolicyRequest, PolicyResponse
from embodied_rl.workers.weights import host_weights, load_host_weights, weights_template
from sim_envs.vector_env import stack_obs


class PolicyServer:
    """A policy on ``device`` answering ``PolicyRequest``s with ``PolicyResponse``s.

    Requests answered together share one forward pass per kind (sampled, deterministic), except seeded ones
    (``PolicyRequest.sample_seed``), which take a pass of their own under their seed."""

    def __init__(self, policy: dict, device: torch.device, rank: int):
        self.policy = build_policy(**policy).to(device).eval()
        self.device = device
        self.rank = rank  # carried by answers (``PolicyResponse.rollout_rank``)
        self.version = 0
        self.forward_passes = 0
        self.offloader = Offloader([self.policy])

    def answer(self, requests: list[PolicyRequest]) -> list[PolicyResponse]:
        """One answer per request, in the order of ``requests``."""
        answers: dict[int, PolicyResponse] = {}
        for index, r in enumerate(requests):
            if r.sample_seed is not None:
                answers[index] = self._answer_seeded(r)
        for deterministic in (False, True):
            group = [i for i, r in enumerate(requests) if r.deterministic == deterministic and r.sample_seed is None]
            if group:
                answers.update(zip(group, self._answer_group([requests[i] for i in group], deterministic)))
        return [answers[i] for i in range(len(requests))]

    def _answer_seeded(self, request: PolicyRequest) -> PolicyResponse:
        """One request in a forward pass of its own, its random draws from its own seed: the same actions whichever
        requests arrived with it (a batch's size can change the floating-point result of a forward pass)."""
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(request.sample_seed)
            return self._answer_group([request], request.deterministic)[0]

    @torch.no_grad()
    def _answer_group(self, requests: list[PolicyRequest], deterministic: bool) -> list[PolicyResponse]:
        pieces = []
        for r in requests:
            pieces.append(r.obs)
            if r.final_obs is not None:
                pieces.append(r.final_obs)
        # An array, or a dict of arrays (camera images with the proprioceptive state, and maybe the instruction)
        obs = pieces[0] if len(pieces) == 1 else stack_obs(pieces)
        obs = ({k: _policy_input(v, self.device) for k, v in obs.items()} if isinstance(obs, dict)
               else torch.as_tensor(obs).to(self.device))
        actions, logp, values, stored = unpack_act(self.policy.act(obs, deterministic=deterministic))
        actions, logp, values = actions.cpu().numpy(), logp.cpu().numpy(), values.cpu().numpy()
        stored = {k: v.cpu().numpy() for k, v in stored.items()} if stored else None
        self.forward_passes += 1
        answers, offset = [], 0
        for r in requests:
            n = rows(r.obs)
            k = 0 if r.final_obs is None else rows(r.final_obs)
            own = slice(offset, offset + n)
            answers.append(PolicyResponse(
                actions[own] if r.want_actions else None, logp[own] if r.want_actions else None,
                values[own], values[offset + n: offset + n + k], self.version, self.rank,
                {key: v[own] for key, v in stored.items()} if stored and r.want_actions else None, r.sequence))
            offset += n + k
        return answers


class PolicyHolder:
    """Weight methods of a worker that holds a ``PolicyServer`` as ``self.server`` (trainers call them the same on
    a rollout worker and on an env worker with an inline policy)."""

    server: PolicyServer

    @property
    def policy_version(self) -> int:
        return self.server.version

    def offload(self) -> MoveReport:
        """Move the weights to host memory (a no-op for memory on CPU)."""
        return self.server.offloader.offload()

    def onload(self) -> MoveReport:
        """Move the weights back to the device for the next sampling turn."""
        return self.server.offloader.onload()

    def load_weights(self, weights_and_version: tuple[dict, int]) -> int:
        """Install ``(state_dict of numpy arrays, policy version)``; returns the version."""
        state_dict, version = weights_and_version
        load_host_weights(self.server.policy, state_dict)
        self.server.version = version
        return version

    def get_weights(self) -> tuple[dict, int]:
        """``(state_dict as numpy arrays, policy version)`` of the inference copy."""
        return host_weights(self.server.policy), self.server.version

    def receive_weights(self, collective: str, only_trained: bool = False) -> int:
        """Receive the weights broadcast by rank 0 of ``collective`` into the policy in place (``only_trained``:
        without the frozen ones, which this copy already holds); returns the version."""
        template = weights_template(self.server.policy, only_trained)
        template[POLICY_VERSION_KEY] = torch.zeros((), dtype=torch.int64)
        received = self.collectives[collective].broadcast_state_dict(template, src=0)
        self.server.version = int(received[POLICY_VERSION_KEY])
        return self.server.version


def _policy_input(value, device):
    """A numeric array as a tensor on ``device``; strings (the instruction, unicode ``[B]``) stay numpy arrays."""
    return torch.as_tensor(value).to(device) if value.dtype.kind in "biufc" else value


def rows(obs) -> int:
    """Rows of an observation batch: an array ``[B, ...]`` or a dict of them."""
    return len(next(iter(obs.values()))) if isinstance(obs, dict) else len(obs)
