"""OpenVLA's action bins: the last 256 vocabulary ids, round trip within half a bin, q01/q99 normalisation."""

import numpy as np
import torch

from embodied_rl.models.openvla.action_tokenizer import ActionTokenizer

HALF_BIN = 1.0 / 255  # bins: 256 edges over [-1, 1], width 2 / 255


def test_round_trip_within_half_a_bin_on_the_last_256_ids():
    tokenizer = ActionTokenizer(action_dim=4, vocab_end=528)
    actions = torch.cat([torch.linspace(-1, 1, 2001), torch.tensor([-1.0, 1.0, 0.0])]).reshape(-1, 4)
    tokens = tokenizer.tokens(actions)
    assert tokens.min() >= 528 - 256 and tokens.max() <= 527
    assert set(tokenizer.tokens(torch.linspace(-1, 1, 5000)).unique().tolist()) == set(range(272, 528))
    decoded = tokenizer.decode_tokens(tokens)
    assert (decoded - actions).abs().max() <= HALF_BIN + 1e-6


def test_token_ids_follow_openvla_digitize():
    """token = vocab_size - digitize(a, linspace(-1, 1, 256)) (OpenVLA's action_tokenizer.py)."""
    tokenizer = ActionTokenizer(action_dim=1, vocab_end=32000)
    values = np.random.default_rng(0).uniform(-1.2, 1.2, 500).astype(np.float32)
    expected = 32000 - np.digitize(np.clip(values, -1, 1), np.linspace(-1, 1, 256))
    assert np.array_equal(tokenizer.tokens(torch.from_numpy(values)).numpy(), expected)


def test_q01_q99_statistics_and_mask():
    tokenizer = ActionTokenizer(action_dim=3, vocab_end=528)
    rng = np.random.default_rng(0)
    demos = np.stack([rng.uniform(0, 10, 4000), rng.uniform(-0.1, 0.1, 4000), np.full(4000, 0.5)], axis=1)
    x = torch.tensor([[5.0, 0.05, 0.5]])
    assert torch.allclose(tokenizer.normalize(x), x.clamp(-1, 1))  # defaults -1/1: pass-through
    tokenizer.set_statistics(demos.reshape(1000, 4, 3))  # [N, K, A] works too
    assert tokenizer.mask.tolist() == [True, True, False]  # a constant dimension is not normalised
    normalized = tokenizer.normalize(x)
    assert abs(normalized[0, 0].item()) < 0.02 and abs(normalized[0, 1].item() - 0.5) < 0.05
    assert torch.allclose(tokenizer.unnormalize(normalized), x, atol=1e-5)
    columns = tokenizer.encode_actions(torch.as_tensor(demos[:8], dtype=torch.float32))
    back = tokenizer.decode_actions(columns, 1)[:, 0]
    width = (tokenizer.q99 - tokenizer.q01) * HALF_BIN  # half a bin in env units
    inside = torch.as_tensor(demos[:8], dtype=torch.float32).clamp(tokenizer.q01, tokenizer.q99)
    assert ((back - inside).abs()[:, :2] <= width[:2] + 1e-4).all()
