"""The int8 rollout copy: every Linear layer is int8, the trained model is untouched, the copy samples from a
nearby but different distribution, and a generation worker re-quantises after each weight update."""

import pytest
import torch

from embodied_rl.engines.generation import SamplingParams
from embodied_rl.engines.hf_generation import HFGenerationEngine
from embodied_rl.engines.quantization import count_int8_linears, quantized_copy
from embodied_rl.models.causal_lm.chat import prompt_ids
from embodied_rl.models.causal_lm.loading import build_tiny_causal_lm

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_int8_copy_quantises_every_linear_and_leaves_the_model_in_full_precision():
    model, _ = build_tiny_causal_lm("tiny", seed=3)
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    copy = quantized_copy(model, "int8")
    assert count_int8_linears(copy) == linears > 0 and count_int8_linears(model) == 0
    assert quantized_copy(model, "none") is model
    ids = torch.randint(0, 30, (3, 12))
    with torch.no_grad():
        full, low = model(ids).logits, copy(ids).logits
    difference = (full - low).abs().max().item()
    assert 0 < difference < 0.1 * full.abs().max().item()  # close, and not the same model
    with pytest.raises(ValueError, match="int4"):
        quantized_copy(model, "int4")


def test_a_generation_worker_samples_from_a_fresh_int8_copy_after_each_weight_update():
    from embodied_rl.workers.generation_worker import GenerationWorker
    from embodied_rl.workers.weights import host_weights

    worker = GenerationWorker.__new__(GenerationWorker)  # the worker's logic in this process, without Ray
    worker.model, worker.tokenizer = build_tiny_causal_lm("tiny", seed=0)
    worker.quantization, worker.engine_name = "int8", "hf"
    worker._build_engine()
    worker.policy_version = 0
    new_model, tokenizer = build_tiny_causal_lm("tiny", seed=5)
    assert worker.load_weights((host_weights(new_model), 7)) == 7
    questions = ["12+30", "7-3", "45+45"]
    answers = worker.generate(questions, dict(max_new_tokens=6, temperature=0.0))
    expected = HFGenerationEngine(quantized_copy(new_model, "int8"), tokenizer.pad_token_id,
                                  tokenizer.eos_token_id).generate([prompt_ids(tokenizer, q) for q in questions],
                                                                   SamplingParams(max_new_tokens=6, temperature=0.0))
    assert [a["token_ids"] for a in answers] == [g.token_ids for g in expected]
    assert all(a["logprobs"] == pytest.approx(g.logprobs, abs=1e-6) for a, g in zip(answers, expected))
    assert count_int8_linears(worker.engine.model) > 0 and all(a["policy_version"] == 7 for a in answers)
