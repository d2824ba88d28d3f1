"""Hugging Face generation: the log-probs it reports are the ones the trainer recomputes, seeded calls repeat,
greedy decoding is deterministic, and responses stop at end-of-sequence."""

import pytest
import torch

from embodied_rl.engines.generation import SamplingParams
from embodied_rl.engines.hf_generation import HFGenerationEngine
from embodied_rl.models.causal_lm.loading import build_tiny_causal_lm
from embodied_rl.models.causal_lm.logprobs import response_logprobs

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def engine():
    model, tokenizer = build_tiny_causal_lm(seed=5)
    prompts = [tokenizer(q)["input_ids"] for q in ("Q: 1+2\nA: ", "Q: 12*3\nA: ", "Q: 7\nA: ")]  # uneven lengths
    return HFGenerationEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id), prompts


@pytest.mark.parametrize("temperature", [0.7, 1.0, 0.0])
def test_reported_log_probs_match_the_trainers_recomputation(engine, temperature):
    engine, prompts = engine
    out = engine.generate(prompts, SamplingParams(max_new_tokens=12, temperature=temperature, seed=1))
    logp, mask = response_logprobs(engine.model, prompts, [g.token_ids for g in out], engine.pad_id, temperature)
    for row, generation in enumerate(out):
        n = len(generation.token_ids)
        assert mask[row].sum() == n and 1 <= n <= 12
        assert torch.allclose(logp[row, :n], torch.tensor(generation.logprobs), atol=1e-4), row


def test_seeded_sampling_repeats_and_greedy_is_deterministic(engine):
    engine, prompts = engine
    sampled = [engine.generate(prompts, SamplingParams(max_new_tokens=10, seed=s)) for s in (3, 3, 4)]
    assert [g.token_ids for g in sampled[0]] == [g.token_ids for g in sampled[1]]
    assert [g.token_ids for g in sampled[0]] != [g.token_ids for g in sampled[2]]
    greedy = [engine.generate(prompts, SamplingParams(max_new_tokens=10, temperature=0)) for _ in range(2)]
    assert [g.token_ids for g in greedy[0]] == [g.token_ids for g in greedy[1]]


def test_responses_end_at_end_of_sequence(engine):
    engine, prompts = engine
    with torch.no_grad():  # make end-of-sequence the certain next token
        engine.model.lm_head.weight[engine.eos_id] += 50.0
    try:
        out = engine.generate(prompts, SamplingParams(max_new_tokens=10, temperature=1.0, seed=0))
        assert all(g.finished and g.token_ids == [engine.eos_id] for g in out)
    finally:
        with torch.no_grad():
            engine.model.lm_head.weight[engine.eos_id] -= 50.0
