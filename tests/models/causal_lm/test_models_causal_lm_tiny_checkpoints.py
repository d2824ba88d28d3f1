"""Checkpoints in the layouts of real ones (a Qwen2 with a pad token, a Llama-3-style model without one, BPE
tokenizers trained here, weights saved in bf16 by ``save_pretrained``) load through the project's own loader, and
sampling follows ``SamplingParams`` alone whatever the checkpoint's ``generation_config.json`` says."""

import json

import pytest
import torch

from embodied_rl.engines.generation import SamplingParams
from embodied_rl.engines.registry import make_generation_engine
from embodied_rl.models.causal_lm.chat import padding_id, prompt_ids
from embodied_rl.models.causal_lm.loading import load_causal_lm, save_causal_lm
from embodied_rl.models.causal_lm.logprobs import response_logprobs
from embodied_rl.models.causal_lm.tiny_checkpoints import write_tiny_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("architecture, has_pad, opening", [
    ("qwen2", True, "<|im_start|>user\n1+2<|im_end|>\n<|im_start|>assistant\n"),
    ("llama3", False, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n1+2<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n")])
def test_a_bf16_checkpoint_with_a_bpe_tokenizer_loads_as_published(tmp_path, architecture, has_pad, opening):
    directory = write_tiny_checkpoint(tmp_path / architecture, architecture)
    assert json.loads((directory / "config.json").read_text())["dtype"] == "bfloat16"
    model, tokenizer = load_causal_lm(directory)
    assert model.dtype == torch.bfloat16 and type(model).__name__.lower().startswith(architecture[:5])
    assert (tokenizer.pad_token_id is not None) == has_pad
    assert padding_id(tokenizer) == (tokenizer.pad_token_id if has_pad else tokenizer.eos_token_id)
    ids = prompt_ids(tokenizer, "1+2")
    assert tokenizer.decode(ids) == opening
    assert len(ids) < len(opening)  # BPE merges: fewer ids than characters
    assert tokenizer.decode(tokenizer("12+30=42")["input_ids"]) == "12+30=42"


def test_float32_master_weights_save_as_the_bf16_checkpoint_they_came_from(tmp_path):
    model, tokenizer = load_causal_lm(write_tiny_checkpoint(tmp_path / "source", "qwen2"))
    model.float()
    saved = save_causal_lm(model, tokenizer, tmp_path / "saved", torch.bfloat16)
    again, _ = load_causal_lm(saved)
    assert again.dtype == torch.bfloat16
    for name, value in again.state_dict().items():
        assert torch.equal(value, model.state_dict()[name].to(torch.bfloat16)), name


def test_the_sampler_ignores_the_checkpoints_generation_config(tmp_path):
    """A repetition penalty of 2 and top-k of 3 in ``generation_config.json`` (float32 weights, so that the only
    difference left is the sampling distribution): the engine's log-probs of what it sampled equal the trainer's
    recomputation under the plain softmax within 1e-4 (with the checkpoint's settings applied, as before: 0.042)."""
    directory = write_tiny_checkpoint(tmp_path / "qwen2", "qwen2", dtype="float32",
                                      generation_config=dict(repetition_penalty=2.0, top_k=3, do_sample=True))
    model, tokenizer = load_causal_lm(directory)
    engine = make_generation_engine("hf", model, tokenizer)
    prompts = [prompt_ids(tokenizer, q) for q in ("1+2", "34-5", "7*8", "9")]
    generations = engine.generate(prompts, SamplingParams(max_new_tokens=12, temperature=1.0, seed=3))
    responses = [g.token_ids for g in generations]
    assert max(len(r) for r in responses) >= 8
    trainer, mask = response_logprobs(model, prompts, responses, padding_id(tokenizer))
    sampler = torch.zeros_like(trainer)
    for row, g in enumerate(generations):
        sampler[row, :len(g.logprobs)] = torch.tensor(g.logprobs)
    assert ((trainer - sampler).abs() * mask).max().item() < 1e-4


def test_raw_prompts_for_a_base_model_and_a_prompt_template(tmp_path):
    _, tokenizer = load_causal_lm(write_tiny_checkpoint(tmp_path / "llama3", "llama3"))
    template = "{question} Give the final answer after '####'."
    raw = prompt_ids(tokenizer, "1+2", "raw", template)
    assert tokenizer.decode(raw, skip_special_tokens=True) == "1+2 Give the final answer after '####'."
    chat = tokenizer.decode(prompt_ids(tokenizer, "1+2", "chat", template))
    assert chat.startswith("<|begin_of_text|><|start_header_id|>user") and "1+2 Give the final" in chat


def test_lora_adapters_merge_into_the_plain_model_they_came_from(tmp_path):
    """A LoRA model's merged weights, loaded into the plain model, give its logits (what generation workers and saved
    models get); only the float32 adapters train."""
    from embodied_rl.models.causal_lm.lora import add_lora, merged_state_dict

    directory = write_tiny_checkpoint(tmp_path / "qwen2", "qwen2", dtype="float32")
    model, _ = load_causal_lm(directory)
    plain, _ = load_causal_lm(directory)
    trained = add_lora(model, 4)
    assert trained == sum(p.numel() for p in model.parameters() if p.requires_grad) > 0
    assert all("lora_" in n and p.dtype == torch.float32 for n, p in model.named_parameters() if p.requires_grad)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)  # as if trained (B starts at zero)
    merged = merged_state_dict(model)
    assert merged.keys() == plain.state_dict().keys()
    plain.load_state_dict(merged)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, model(input_ids=ids).logits, rtol=1e-4, atol=1e-5)
        assert not torch.allclose(plain(input_ids=ids).logits, load_causal_lm(directory)[0](input_ids=ids).logits)
