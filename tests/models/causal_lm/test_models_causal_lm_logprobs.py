"""Response log-probs of Hugging Face models come from the final hidden states in chunks of the output layer: the
same values and gradients as from full ``[B, T, V]`` logits, with no more than a chunk's logits kept for backward."""

import pytest
import torch

from embodied_rl.models.causal_lm import logprobs
from embodied_rl.models.causal_lm.loading import build_tiny_causal_lm

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = [[3, 4, 5, 6], [7, 8], [9, 10, 11]]
RESPONSES = [[12, 13, 14], [15, 16, 17, 18, 19], []]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_log_probs_equal_those_of_full_logits_with_their_gradients(monkeypatch, temperature):
    model, _ = build_tiny_causal_lm("tiny")
    monkeypatch.setattr(logprobs, "CHUNK_TOKENS", 3)  # 8 response tokens: chunks of 3, 3, 2
    results = {}
    for name in ("chunked", "full"):
        model.zero_grad()
        logp, mask = logprobs.response_logprobs(model, PROMPTS, RESPONSES, 0, temperature, full_logits=name == "full")
        (logp * torch.arange(1, 6)).sum().backward()
        results[name] = (logp.detach(), mask, {n: p.grad.clone() for n, p in model.named_parameters()})
    (logp, mask, grads), (full_logp, full_mask, full_grads) = results["chunked"], results["full"]
    assert torch.equal(mask, full_mask) and mask.sum() == 8 and logp.shape == (3, 5)
    torch.testing.assert_close(logp, full_logp, rtol=0, atol=2e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, full_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_no_more_than_a_chunk_of_logits_is_kept_for_the_backward_pass(monkeypatch, tmp_path):
    from embodied_rl.models.causal_lm.loading import load_causal_lm
    from embodied_rl.models.causal_lm.tiny_checkpoints import write_tiny_checkpoint

    model, _ = load_causal_lm(write_tiny_checkpoint(tmp_path / "qwen2", "qwen2", dtype="float32"))
    vocab = model.config.vocab_size  # 512, where the width is 64
    monkeypatch.setattr(logprobs, "CHUNK_TOKENS", 2)
    widest = []
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(tensor):
        own = tensor.untyped_storage().data_ptr() in weights  # the output layer's weight (a view of it)
        if not own and tensor.dim() and tensor.shape[-1] == vocab and tensor.dtype == torch.float32:
            widest.append(tensor.numel() // vocab)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logprobs.response_logprobs(model, PROMPTS, RESPONSES, 0)
    assert max(widest, default=0) <= 2  # rows of float32 logits saved at once (full logits: 3 x 10 positions)
