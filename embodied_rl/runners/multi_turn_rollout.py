"""Multi-turn rollouts: conversations stepped turn by turn between a generation function and a multi-turn text env
(``sim_envs/math/multi_turn.py``), returned as token ids ready for the LM trainer.

Each turn, the conversations still going are sent to ``generate`` as their whole context so far (the first prompt,
then every model and env token); a model turn is cut right after the env's first stop string (``</calc>``); the
env answers each with an observation turn or ends the conversation. Env tokens are tokenized on their own and
appended as ids, so the ids returned are exactly the ids the model saw (never a re-tokenization of joined text):
the trainer's one forward pass over ``prompt_ids + token_ids`` recomputes the log-probs the engine sampled with,
at the model tokens (``loss_mask`` 1); env tokens carry log-prob 0.0 and ``loss_mask`` 0.
"""

from __future__ import annotations

from typing import Callable, Sequence

from embodied_rl.models.causal_lm.chat import prompt_ids as chat_prompt_ids

SEED_STRIDE = 100_003
"""Turn t of a seeded rollout samples with seed ``params["seed"] + t * SEED_STRIDE`` (turns draw independently)."""

Generate = Callable[[list[list[int]], dict], Sequence]
"""``generate(prompt_id_lists, params) -> [dict(token_ids, logprobs, finished), ...]`` (or ``Generation``s)."""


def rollout(generate: Generate, env, tokenizer, params: dict, state_ids: list[int] | None = None) -> list[dict]:
    """Run one round of ``env``'s N conversations (``env.reset(state_ids=...)`` draws their problems) to the end.

    ``env``: ``reset``, ``step`` (N turn texts, None for conversations that are over) and ``stop_strings``, as
    ``ToolTaskEnv``. ``params``: passed to ``generate`` (e.g. ``max_new_tokens``, ``temperature``, ``seed``),
    ``max_new_tokens`` per turn.

    Returns per conversation: ``prompt_ids`` (the first prompt), ``token_ids`` (every model and env token after
    it), ``logprobs`` (the engine's at model tokens, 0.0 at env tokens), ``loss_mask`` (1 model, 0 env), ``text``
    (``token_ids`` decoded), ``turns``, ``truncated`` (ended by the turn limit), ``reward`` and its parts
    ``outcome``, ``format``, ``tool``, with ``tool_calls`` and ``malformed_calls``.
    """
    obs = env.reset(state_ids=state_ids)
    n = len(obs["prompt"])
    prompts = [chat_prompt_ids(tokenizer, str(q)) for q in obs["prompt"]]
    out = [dict(prompt_ids=p, token_ids=[], logprobs=[], loss_mask=[]) for p in prompts]
    active = list(range(n))
    turn = 0
    while active:
        turn_params = dict(params)
        if params.get("seed") is not None:
            turn_params["seed"] = params["seed"] + turn * SEED_STRIDE
        generations = generate([prompts[i] + out[i]["token_ids"] for i in active], turn_params)
        actions: list[str | None] = [None] * n
        for i, generation in zip(active, generations):
            ids, logprobs = cut_at_stop(tokenizer, *_fields(generation), env.stop_strings)
            _append(out[i], ids, logprobs, 1)
            actions[i] = tokenizer.decode(ids, skip_special_tokens=True)
        batch = env.step(actions)
        ended = batch.terminated | batch.truncated
        for i in active:
            if ended[i]:
                out[i].update(_results(batch, i))
            else:
                observation = str(batch.obs["observation"][i])
                ids = list(tokenizer(observation, add_special_tokens=False)["input_ids"])
                _append(out[i], ids, [0.0] * len(ids), 0)
        active = [i for i in active if not ended[i]]
        turn += 1
    for row in out:
        row["text"] = tokenizer.decode(row["token_ids"], skip_special_tokens=True)
    return out


def cut_at_stop(tokenizer, token_ids: list[int], logprobs: list[float],
                stop_strings: Sequence[str]) -> tuple[list[int], list[float]]:
    """The shortest prefix of ``token_ids`` whose text holds a stop string (all of them where none does), and its
    log-probs: a prefix of a sampled response is a sample of that prefix, so its log-probs stay valid."""
    def stops(k: int) -> bool:
        text = tokenizer.decode(token_ids[:k], skip_special_tokens=True)
        return any(s in text for s in stop_strings)

    if not stop_strings or not stops(len(token_ids)):
        return list(token_ids), list(logprobs)
    low, high = 1, len(token_ids)  # stops(high) holds; text only grows with k, so bisect for the first k
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if stops(middle) else (middle + 1, high)
    return list(token_ids[:high]), list(logprobs[:high])


def trainer_rows(conversations: list[dict]) -> list[dict]:
    """What the LM trainer takes of ``rollout``'s conversations (a ``ResponsePart``'s rows), in the same
    (group-contiguous) order: ids, log-probs, ``loss_mask``, ``finished`` (ended within the turn limit) and the
    ``policy_version`` that wrote them (0 where the rollout did not record one). The scores, the composite rewards,
    go separately."""
    keys = ("prompt_ids", "token_ids", "logprobs", "loss_mask")
    return [{**{k: c[k] for k in keys}, "finished": not c["truncated"], "policy_version": c.get("policy_version", 0)}
            for c in conversations]


def encode_demonstration(tokenizer, question: str, segments: Sequence[tuple[str, bool]]) -> dict:
    """A demonstrated conversation (``(text, written_by_model)`` segments, as ``multi_turn.demonstration``) as the
    ids a rollout of it would have: ``prompt_ids``, ``token_ids`` (each segment tokenized on its own, then
    end-of-sequence after the last) and ``loss_mask`` (1 on model segments and the end-of-sequence)."""
    token_ids: list[int] = []
    loss_mask: list[int] = []
    for text, by_model in segments:
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        token_ids += ids
        loss_mask += [int(by_model)] * len(ids)
    return dict(prompt_ids=chat_prompt_ids(tokenizer, question), token_ids=token_ids + [tokenizer.eos_token_id],
                loss_mask=loss_mask + [1])


def _fields(generation) -> tuple[list[int], list[float]]:
    if isinstance(generation, dict):
        return list(generation["token_ids"]), list(generation["logprobs"])
    return list(generation.token_ids), list(generation.logprobs)


def _append(row: dict, ids: list[int], logprobs: list[float], mask: int) -> None:
    row["token_ids"] += ids
    row["logprobs"] += logprobs
    row["loss_mask"] += [mask] * len(ids)


def _results(batch, i: int) -> dict:
    info = batch.info
    return dict(turns=int(info["turns"][i]), truncated=bool(batch.truncated[i]), reward=float(batch.rewards[i]),
                outcome=float(info["reward/outcome"][i]), format=float(info["reward/format"][i]),
                tool=float(info["reward/tool"][i]), tool_calls=int(info["tool/calls"][i]),
                malformed_calls=int(info["tool/malformed"][i]))
