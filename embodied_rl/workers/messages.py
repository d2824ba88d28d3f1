"""What env, rollout and actor workers send each other through channels."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

REQUESTS_KEY = "requests"
TRAJECTORIES_KEY = "trajectories"
POLICY_VERSION_KEY = "__policy_version__"  # rides with the weights in a broadcast state dict


def responses_key(env_rank: int, stage: int = 0, incarnation: int = 0) -> str:
    """Where the answers for one pipeline stage of one env worker go. ``incarnation`` counts the replacements of
    the worker at ``env_rank``: a replacement never receives an answer to a request of the worker it replaced."""
    return f"responses:{env_rank}:{stage}:{incarnation}"


@dataclass
class PolicyRequest:
    """An env worker asks for actions. obs ``[b, ...]``; final_obs ``[k, ...]``: last observations of episodes
    that ended at the previous step (their values bootstrap truncation); ``want_actions=False`` asks for values only;
    ``stage``: the env worker's pipeline stage the answer goes back to; ``incarnation``: the env worker's (see
    ``responses_key``); ``sequence``: numbers the stage's requests, echoed in the response (a request sent again
    after a rollout worker died may be answered twice: the env worker keeps the answer to its latest one).
    ``sample_seed``: sample this request's actions from this seed, in a forward pass of its own (reproducible runs:
    the actions do not depend on which other requests arrived at the same time); None: batched, unseeded.
    """

    env_rank: int
    obs: object
    final_obs: object | None
    deterministic: bool = False
    want_actions: bool = True
    stage: int = 0
    incarnation: int = 0
    sequence: int = 0
    sample_seed: int | None = None


@dataclass
class PolicyResponse:
    """actions ``[b, A]`` float32, logp ``[b]``, values ``[b]``, final_values ``[k]``; produced by
    ``policy_version``. ``stored``: what the policy keeps of its decision for the update (``{"stored.<name>": [b,
    ...]}``, e.g. a Pi0 denoising chain), recorded beside the step's observation; None when it keeps nothing."""

    actions: np.ndarray | None
    logp: np.ndarray | None
    values: np.ndarray
    final_values: np.ndarray
    policy_version: int
    rollout_rank: int
    stored: dict | None = None
    sequence: int = 0


class ResendRequest:
    """Sent to an env worker's response keys when a rollout worker died: requests it had taken are lost, so every
    env worker waiting for an answer sends its latest request again."""


class StopServing:
    """Sentinel telling a rollout worker to return from ``serve``."""


@dataclass
class Trajectory:
    """One env worker's ``T`` steps of ``b`` envs, time-major.

    obs ``[T, b, D]`` (or a dict of ``[T, b, ...]`` arrays), actions ``[T, b, A]``, logp / values / rewards
    ``[T, b]`` float32, terminated / truncated / success ``[T, b]`` bool (success: the task's success flag after
    step t), final_values ``[T, b]`` (V of the last observation of every episode
    that ended at step t, terminated or truncated; 0 elsewhere: the trainer decides which ones bootstrap),
    next_value ``[b]`` (V of the observation after step T), policy_versions ``[T]`` int64
    (the version that chose each step's actions), env_rank (the producer), sampling_round (the driver's number of
    the round that produced it; None outside a run's rounds): the actor trains a round only on its own trajectories.
    next_obs (only from env workers started with ``store_next_obs``, for off-policy learners): like obs, the
    observation after step t (the episode's last observation where it ended at step t).
    """

    obs: np.ndarray
    actions: np.ndarray
    logp: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    success: np.ndarray
    final_values: np.ndarray
    next_value: np.ndarray
    policy_versions: np.ndarray
    env_rank: int
    sampling_round: int | None = None
    next_obs: object | None = None


TEXT_ROUNDS_KEY = "text-rounds"
"""Where a text run's sampled responses go to the trainer (rank 0 of the LM actor reads it)."""


@dataclass
class ResponsePart:
    """Part ``part`` of text sampling round ``round_id``: its responses, in the order their prompts were given.

    ``rows``: one dict per response with ``prompt_ids``, ``token_ids``, ``logprobs``, ``finished`` and
    ``policy_version`` (and ``loss_mask`` for a multi-turn conversation). ``attempt``: how many times the part was
    asked for again after its producer died (a part sent by a generation worker that died before it returned is
    superseded by its replacement's, which the driver names)."""

    round_id: int
    part: int
    rows: list
    attempt: int = 0
