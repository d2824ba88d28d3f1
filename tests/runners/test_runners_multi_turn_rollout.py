"""Multi-turn rollouts: only the conversations still going are stepped, model turns are cut after a tool call, env
observations are appended as their own ids with loss mask 0 and log-prob 0, and the ids returned are the ids the
model saw: the trainer's recomputation over the whole sequence gives back the engine's log-probs at model tokens."""

import dataclasses
import re

import pytest
import torch

from embodied_rl.engines.generation import SamplingParams
from embodied_rl.engines.hf_generation import HFGenerationEngine
from embodied_rl.models.causal_lm.char_tokenizer import build_char_tokenizer
from embodied_rl.models.causal_lm.chat import prompt_ids
from embodied_rl.models.causal_lm.loading import build_tiny_causal_lm
from embodied_rl.models.causal_lm.logprobs import response_logprobs
from embodied_rl.runners.multi_turn_rollout import (SEED_STRIDE, cut_at_stop, encode_demonstration, rollout,
                                                    trainer_rows)
from sim_envs.math.arithmetic import Problem
from sim_envs.math.multi_turn import ToolTaskEnv, demonstration, generate_problems

pytestmark = pytest.mark.usefixtures("one_torch_thread")
MERGED = "</calc> ="


class MergingTokenizer:
    """The character tokenizer plus one token for ``MERGED``: a conversation's joined text tokenizes differently
    from its turns tokenized one by one, as with a BPE tokenizer."""

    def __init__(self):
        self.base = build_char_tokenizer()
        self.merged_id = len(self.base)
        self.eos_token_id, self.pad_token_id = self.base.eos_token_id, self.base.pad_token_id

    def apply_chat_template(self, *args, **kwargs):
        return self.base.apply_chat_template(*args, **kwargs)

    def __call__(self, text, add_special_tokens=False):
        ids = []
        for index, part in enumerate(text.split(MERGED)):
            ids += ([self.merged_id] if index else []) + self.base(part, add_special_tokens=False)["input_ids"]
        return {"input_ids": ids}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(MERGED if i == self.merged_id else self.base.decode([i], skip_special_tokens=skip_special_tokens)
                       for i in ids)


class Scripted:
    """A generate function playing each question's turns in order (end-of-sequence after each), with a distinct
    log-prob per generated token; it records every call."""

    def __init__(self, tokenizer, scripts: dict[str, list[str]]):
        self.tokenizer, self.scripts = tokenizer, scripts
        self.prompts = {q: prompt_ids(tokenizer, q) for q in scripts}
        self.calls, self.turns, self.tokens = [], dict.fromkeys(scripts, 0), 0

    def __call__(self, contexts, params):
        self.calls.append(([list(c) for c in contexts], dict(params)))
        out = []
        for context in contexts:
            (question,) = [q for q, p in self.prompts.items() if context[:len(p)] == p]
            ids = self.tokenizer(self.scripts[question][self.turns[question]])["input_ids"] + [
                self.tokenizer.eos_token_id]
            self.turns[question] += 1
            logprobs = [-(self.tokens + k + 1) / 1000 for k in range(len(ids))]
            self.tokens += len(ids)
            out.append(dict(token_ids=ids, logprobs=logprobs, finished=True))
        return out


def test_scripted_conversations_interleave_model_and_env_ids_exactly():
    tokenizer = MergingTokenizer()
    problems = [Problem("2*3+4", "10"), Problem("5*5-1", "24"), Problem("9-2*3", "3")]
    scripts = {"2*3+4": ["<calc>2*3+4</calc> junk = 99", "Answer: 10"],  # what follows the call is cut off
               "5*5-1": ["Answer: 24"],
               "9-2*3": ["<calc>9-</calc>", "<calc>9-2*3</calc>", "<calc>3</calc>"]}  # hits max_turns=3
    generate = Scripted(tokenizer, scripts)
    env = ToolTaskEnv(problems, 3, max_turns=3, malformed_penalty=0.5, use_math_verify=False)
    out = rollout(generate, env, tokenizer, dict(max_new_tokens=40, seed=7), state_ids=[0, 1, 2])

    assert [len(contexts) for contexts, _ in generate.calls] == [3, 2, 1]  # only the conversations still going
    assert [params["seed"] for _, params in generate.calls] == [7, 7 + SEED_STRIDE, 7 + 2 * SEED_STRIDE]
    ids = lambda text: tokenizer(text)["input_ids"]  # noqa: E731
    eos = tokenizer.eos_token_id
    expected = [  # (ids, written by the model) pieces of each conversation
        [(ids("<calc>2*3+4</calc>"), 1), (ids(" = 10\n"), 0), (ids("Answer: 10") + [eos], 1)],
        [(ids("Answer: 24") + [eos], 1)],
        [(ids("<calc>9-</calc>"), 1), (ids(" = error\n"), 0), (ids("<calc>9-2*3</calc>"), 1), (ids(" = 3\n"), 0),
         (ids("<calc>3</calc>"), 1)]]
    for row, question, pieces in zip(out, scripts, expected):
        assert row["prompt_ids"] == prompt_ids(tokenizer, question)
        assert row["token_ids"] == [t for piece, _ in pieces for t in piece]
        assert row["loss_mask"] == [m for piece, m in pieces for _ in piece]
        assert all(lp == 0.0 for lp, m in zip(row["logprobs"], row["loss_mask"]) if m == 0)
        assert all(lp < 0.0 for lp, m in zip(row["logprobs"], row["loss_mask"]) if m == 1)
        assert len(row["logprobs"]) == len(row["token_ids"])
    # the second call saw exactly the first turn's kept ids and the observation's ids after the prompt
    assert generate.calls[1][0][0] == out[0]["prompt_ids"] + ids("<calc>2*3+4</calc>") + ids(" = 10\n")
    # the first turn's log-probs are the scripted ones of the kept tokens; the cut-off tokens' are gone
    kept = len(ids("<calc>2*3+4</calc>"))
    assert out[0]["logprobs"][:kept] == [-(k + 1) / 1000 for k in range(kept)]
    # the ids are the turns' own, not a re-tokenization of the joined text (which has the merged token)
    assert tokenizer(out[0]["text"])["input_ids"] != out[0]["token_ids"]
    assert out[0]["text"] == "<calc>2*3+4</calc> = 10\nAnswer: 10"

    summary = [(r["turns"], r["truncated"], r["outcome"], r["format"], r["tool_calls"], r["malformed_calls"])
               for r in out]
    assert summary == [(2, False, 1, 1, 1, 0), (1, False, 1, 1, 0, 0), (3, True, 0, 0, 3, 1)]
    assert [r["reward"] for r in out] == pytest.approx([1, 1, -0.5]) and out[2]["tool"] == pytest.approx(-0.5)
    rows = trainer_rows(out)
    assert [r["loss_mask"] for r in rows] == [r["loss_mask"] for r in out]
    assert [r["finished"] for r in rows] == [True, True, False]  # the third was cut by the turn limit


def test_a_turn_is_cut_after_the_first_stop_string_only():
    tokenizer = build_char_tokenizer()
    ids = tokenizer("ab</calc>cd</calc>")["input_ids"]
    logprobs = [float(-k) for k in range(len(ids))]
    assert cut_at_stop(tokenizer, ids, logprobs, ("</calc>",)) == (ids[:9], logprobs[:9])
    assert cut_at_stop(tokenizer, ids[:8], logprobs[:8], ("</calc>",)) == (ids[:8], logprobs[:8])
    assert cut_at_stop(tokenizer, [], [], ("</calc>",)) == ([], [])


@pytest.fixture(scope="module")
def tool_model():
    """The tiny model after a few dozen SFT steps on four demonstrations (model segments only): enough to write
    tool calls, not enough to always get them right."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # module fixtures set up before one_torch_thread applies
    try:
        yield _sft_on_demonstrations()
    finally:
        torch.set_num_threads(threads)


def _sft_on_demonstrations():
    torch.manual_seed(0)
    model, tokenizer = build_tiny_causal_lm(seed=0)
    problems = generate_problems(4, digits=1, terms=3)
    demos = [encode_demonstration(tokenizer, p.question, demonstration(p)) for p in problems]
    mask = torch.zeros(len(demos), max(len(d["token_ids"]) for d in demos))
    for row, demo in enumerate(demos):
        mask[row, :len(demo["loss_mask"])] = torch.tensor(demo["loss_mask"], dtype=torch.float)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(50):
        logp, _ = response_logprobs(model, [d["prompt_ids"] for d in demos], [d["token_ids"] for d in demos],
                                    tokenizer.pad_token_id)
        loss = -(logp * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), tokenizer, problems


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_a_real_models_rollout_log_probs_are_the_trainers_at_model_tokens(tool_model, temperature):
    model, tokenizer, problems = tool_model
    engine = HFGenerationEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    seen = []

    def generate(contexts, params):
        seen.append(contexts)
        return [dataclasses.asdict(g) for g in engine.generate(contexts, SamplingParams(**params))]

    env = ToolTaskEnv(problems, 8, group_size=2, max_turns=3)
    out = rollout(generate, env, tokenizer, dict(max_new_tokens=24, temperature=temperature, seed=3),
                  state_ids=[0, 0, 1, 1, 2, 2, 3, 3])
    assert len(seen) >= 2 and any(0 in row["loss_mask"] for row in out)  # some conversations went on past a call
    with torch.no_grad():
        logp, _ = response_logprobs(model, [r["prompt_ids"] for r in out], [r["token_ids"] for r in out],
                                    tokenizer.pad_token_id, temperature)
    for row, recomputed in zip(out, logp):
        mask = torch.tensor(row["loss_mask"], dtype=torch.bool)
        rollout_logp = torch.tensor(row["logprobs"])
        assert torch.allclose(recomputed[:len(mask)][mask], rollout_logp[mask], atol=1e-4)
        assert (rollout_logp[~mask] == 0).all()
        # the masked tokens are exactly the env's observations, each right after a tool call
        observations = [tokenizer.decode(row["token_ids"][m.start():m.end()])
                        for m in re.finditer(r"0+", "".join(map(str, row["loss_mask"])))]
        assert len(observations) == row["tool_calls"] - row["truncated"], row["text"]
        assert all(re.fullmatch(r" = (-?\d+(/\d+)?|error)\n", o) for o in observations), observations
        assert row["turns"] == len(observations) + 1 and 1 <= row["turns"] <= 3


def test_an_encoded_demonstration_is_the_rollout_of_its_model_turns():
    tokenizer = MergingTokenizer()  # "</calc> =" would merge if the demonstration were tokenized in one piece
    problem = Problem("2*3+4", "10")
    segments = demonstration(problem)
    generate = Scripted(tokenizer, {problem.question: [text for text, by_model in segments if by_model]})
    (played,) = rollout(generate, ToolTaskEnv([problem], 1), tokenizer, dict(max_new_tokens=40))
    encoded = encode_demonstration(tokenizer, problem.question, segments)
    assert encoded == {k: played[k] for k in ("prompt_ids", "token_ids", "loss_mask")}
    assert played["reward"] == 1.0 and 0 in encoded["loss_mask"]
