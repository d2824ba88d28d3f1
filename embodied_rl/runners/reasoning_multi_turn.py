"""Reasoning runs on a multi-turn text task (``math_tool``: the model calls a calculator, ``<calc>12*34</calc>``, and
the env answers `` = 408``): the reasoning run's loop (``ReasoningRunner``) with conversations for responses.

Each iteration is one round of the train env's N conversations (``rl.prompts_per_iteration`` problems, each
``algorithm.group_size`` times) stepped by ``multi_turn_rollout.rollout``: every turn, the conversations still going
are split over the generation workers as token ids (``GenerationWorker.generate_ids``), each model turn is cut after
its first tool call and the env worker (``ToolEnvWorker``) answers it. The trainer's batch carries the ``loss_mask``
(env tokens 0: never trained on) and the composite reward (outcome + format + tool penalty), each part logged
(``reward/outcome``, ``reward/format``, ``reward/tool``, ``tool/calls``, ``tool/malformed``, ``train/turns``).
The SFT warm start trains on the env's demonstrations with the env's turns masked out (``sft_update_ids``);
held-out evaluation is a rollout of one conversation per held-out problem (greedy by default).

Not supported here: async rollout (``rollout.max_staleness=1``) and DAPO's resample-to-fill
(``algorithm.max_sampling_rounds`` > 1); both are refused before anything runs.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

import sim_envs
from embodied_rl.config.errors import ConfigError
from embodied_rl.config.reasoning import ReasoningConfig
from embodied_rl.models.causal_lm.loading import load_tokenizer
from embodied_rl.runners.multi_turn_rollout import encode_demonstration, rollout, trainer_rows
from embodied_rl.runners.loop import Round
from embodied_rl.runners.reasoning import EVAL_SEED, ReasoningRunner
from embodied_rl.runners.weight_sync import get_failing_fast
from embodied_rl.runtime import WorkerGroup
from embodied_rl.utils.checkpoint import Checkpoint
from embodied_rl.workers.messages import TEXT_ROUNDS_KEY, ResponsePart
from embodied_rl.workers.tool_env_worker import ToolEnvProxy, ToolEnvWorker

TRAIN_KEYS = {"reward": "train/reward", "outcome": "reward/outcome", "format": "reward/format", "tool": "reward/tool",
              "tool_calls": "tool/calls", "malformed_calls": "tool/malformed", "called": "tool/call_rate",
              "turns": "train/turns", "truncated": "train/truncated"}
"""A training round's metric names: per-conversation means of ``rollout``'s fields (``called``: >= 1 tool call)."""
EVAL_KEYS = {"reward": "eval/reward", "outcome": "eval/heldout_accuracy", "format": "eval/heldout_formatted",
             "tool": "eval/reward_tool", "tool_calls": "eval/tool_calls", "malformed_calls": "eval/malformed_calls",
             "called": "eval/tool_call_rate", "turns": "eval/turns", "truncated": "eval/truncated"}


def check_multi_turn(config: ReasoningConfig) -> None:
    """The options a multi-turn run refuses, as a one-line ``ConfigError`` naming the key."""
    if config.rollout.max_staleness != 0:
        raise ConfigError(f"rollout.max_staleness={config.rollout.max_staleness!r}: async rollout is not supported for the "
                          f"multi-turn task {config.task!r}; allowed: 0")
    if config.model.prompt_format != "chat" or config.model.prompt_template != "{question}":
        raise ConfigError(f"model.prompt_format={config.model.prompt_format!r} / model.prompt_template: the multi-turn "
                          f"task {config.task!r} builds its conversation through the chat template; allowed: chat, "
                          "{question}")
    if config.eval.samples_per_problem:
        raise ConfigError(f"eval.samples_per_problem={config.eval.samples_per_problem!r}: pass@k and maj@k are not "
                          f"supported for the multi-turn task {config.task!r}; allowed: 0")
    if config.algorithm.max_sampling_rounds != 1:
        raise ConfigError(f"algorithm.max_sampling_rounds={config.algorithm.max_sampling_rounds!r}: resample-to-fill "
                          f"is not supported for the multi-turn task {config.task!r}; allowed: 1")


class MultiTurnReasoningRunner(ReasoningRunner):
    def __init__(self, config: ReasoningConfig, run_dir: Path, resume: Checkpoint | None = None):
        check_multi_turn(config)
        super().__init__(config, run_dir, resume)
        self.tokenizer = load_tokenizer(config.model.name)  # the driver's: prompts and env turns to ids

    def _replaceable_env(self, env: WorkerGroup) -> None:
        """None: a conversation env's episodes in flight are not restorable from a sampler state."""
        return None

    def _env_group(self, share: float, slots: dict) -> WorkerGroup:
        c = self.config
        G = c.algorithm.group_size
        group = WorkerGroup(ToolEnvWorker, "tool-env", 1, cpus_per_worker=share, task=sim_envs.get_task(c.task),
                            options=dict(c.env), num_envs=c.rl.prompts_per_iteration * G, group_size=G,
                            heldout_envs=c.eval.num_problems, seed=c.seed, **slots)
        worker = group.workers[0]
        self.train_env, self.heldout_env = ToolEnvProxy(worker, "train"), ToolEnvProxy(worker, "heldout")
        return group

    def _rollout(self, env: ToolEnvProxy, temperature: float, seed: int,
                 state_ids: list[int] | None = None) -> tuple[list[dict], dict]:
        """One round of ``env``'s conversations, each turn's contexts split over the generation workers; the
        conversations (each with the oldest ``policy_version`` that wrote a turn of the round) and the round's
        generation seconds (the slowest worker's, summed over turns) and generated tokens (before the cut)."""
        stats = {"generate_s": 0.0, "tokens": 0, "version": None}

        def generate(contexts: list[list[int]], params: dict) -> list[dict]:
            started = self.workers.start_generation(contexts, params["temperature"], params["seed"], "generate_ids")
            out = self.workers.finish_generation(started)
            stats["generate_s"] += max(g["generate_s"] for g in out)
            stats["tokens"] += sum(len(g["token_ids"]) for g in out)
            oldest = min(g["policy_version"] for g in out)
            stats["version"] = oldest if stats["version"] is None else min(stats["version"], oldest)
            return out

        conversations = rollout(generate, env, self.tokenizer, dict(temperature=temperature, seed=seed), state_ids)
        for conversation in conversations:
            conversation["policy_version"] = stats["version"]
        return conversations, stats

    def start_sampling(self, iteration: int, sampling_round: int) -> int:
        """The round's sampling seed (turn t samples with ``seed + t * SEED_STRIDE``): the round itself runs in
        ``finish_sampling``, turn by turn, synchronously."""
        return self.config.seed * 1_000_003 + iteration

    def finish_sampling(self, pending: int) -> Round:
        started = time.time()
        conversations, stats = self._rollout(self.train_env, self.config.rollout.temperature, pending)
        return Round(conversations, started, time.time(),
                     {"generate_s": stats["generate_s"], "tokens": stats["tokens"]})

    def _score(self, sampled: Round) -> list[float]:
        """The conversations' composite rewards (the env scored each when it ended)."""
        self._conversations = sampled.data
        self.responses += len(sampled.data)
        return [r["reward"] for r in sampled.data]

    def _sampling_metrics(self) -> dict:
        conversations, generated = self._conversations, self._generated
        return {**_conversation_metrics(conversations, TRAIN_KEYS),
                "train/env_tokens": sum(len(r["loss_mask"]) - sum(r["loss_mask"]) for r in conversations),
                "train/model_tokens": sum(sum(r["loss_mask"]) for r in conversations),
                "time/generate_s": generated["generate_s"],
                "time/generated_tokens_per_s": generated["tokens"] / max(generated["generate_s"], 1e-9)}

    def _send_round(self, sampled: Round) -> tuple[int, dict[int, int]]:
        """The conversations, assembled here turn by turn, sent to the trainer on the channel as one part: ids,
        log-probs and loss mask (``trainer_rows``), whether each ended within the turn limit, and its version."""
        round_id, rows = next(self.round_ids), trainer_rows(sampled.data)
        self.channel.put(ResponsePart(round_id, 0, rows), TEXT_ROUNDS_KEY, timeout=self.config.fault.hang_timeout_s)
        return round_id, {0: 0}

    def _heldout_metrics(self) -> dict:
        c = self.config
        n = self.heldout_env.num_envs
        conversations, _ = self._rollout(self.heldout_env, c.rollout.eval_temperature, EVAL_SEED, list(range(n)))
        return {**_conversation_metrics(conversations, EVAL_KEYS), "eval/problems": n}

    def _sft_update(self) -> dict:
        """SFT on every train problem's demonstration (a correct tool call, its result, the answer), the env's
        turns masked out of the loss."""
        c = self.config.sft
        demonstrations = self.workers.call_env("demonstrations")
        examples = [encode_demonstration(self.tokenizer, question, segments) for question, segments in demonstrations]
        return get_failing_fast(self._actor("sft_update_ids", examples, c.steps, c.batch_size, c.lr),
                                self.config.fault.update_timeout_s,
                                "the SFT warm start (fault.update_timeout_s)")[0]


def _conversation_metrics(conversations: list[dict], names: dict[str, str]) -> dict:
    """Means over conversations of the reward and its parts, tool calls, malformed calls, the share that called
    the tool, turns and the share cut by the turn limit, under ``names``."""
    rows = [{**r, "called": r["tool_calls"] > 0} for r in conversations]
    return {name: float(np.mean([r[field] for r in rows])) for field, name in names.items()}
