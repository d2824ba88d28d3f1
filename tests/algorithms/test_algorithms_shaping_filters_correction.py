import pytest
import torch

from embodied_rl.algorithms.correction import truncated_is_weights
from embodied_rl.algorithms.filters import dynamic_sampling_mask, gfpo_keep_mask
from embodied_rl.algorithms.shaping import overlong_penalty


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(
        actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0
    )


def test_overlong_penalty_three_regions():
    # max_len 10, cache 4 -> soft window (6, 10]
    lengths = torch.tensor([3, 6, 7, 8, 10, 11, 20])
    # 3, 6: 0 ; 7: (6-7)/4 = -0.25 ; 8: -0.5 ; 10: -1 ; >10: -1
    out = overlong_penalty(lengths, 10, 4)
    assert out.dtype == torch.float32
    close(out, [0.0, 0.0, -0.25, -0.5, -1.0, -1.0, -1.0])


def test_overlong_penalty_rejects_bad_cache():
    with pytest.raises(ValueError):
        overlong_penalty(torch.tensor([1]), 10, 0)


def test_truncated_is_weights_capped_and_detached():
    train = torch.tensor([[0.0, 1.0], [-1.0, 0.5]], requires_grad=True)
    rollout = torch.zeros(2, 2)
    w = truncated_is_weights(train, rollout, cap=2.0)
    # exp: [1, e=2.718 -> capped 2], [0.3678794, 1.6487213]
    close(w, [[1.0, 2.0], [0.3678794, 1.6487213]])
    assert not w.requires_grad


def test_dynamic_sampling_mask():
    scores = torch.tensor([1.0, 1, 1, 0, 1, 0, 0, 0, 0, 2, 2, 3])
    mask = dynamic_sampling_mask(scores, 3)
    assert mask.dtype == torch.bool
    assert mask.tolist() == [False] * 3 + [True] * 3 + [False] * 3 + [True] * 3
    with pytest.raises(ValueError, match="multiple"):
        dynamic_sampling_mask(scores, 5)


def test_gfpo_keep_smallest_with_index_tiebreak():
    metric = torch.tensor([5, 3, 3, 9, 1, 1, 1, 1, 7, 2, 8, 4])
    # group 0: two smallest are the two 3s (idx 1, 2)
    # group 1: all tied -> lowest indices 0, 1
    # group 2: [7,2,8,4] -> 2 and 4
    assert gfpo_keep_mask(metric, 4, 2).tolist() == [
        False, True, True, False,
        True, True, False, False,
        False, True, False, True,
    ]
    # keep=1: the tie in group 0 goes to the lower index (1)
    assert gfpo_keep_mask(metric, 4, 1).tolist() == [
        False, True, False, False,
        True, False, False, False,
        False, True, False, False,
    ]
    assert gfpo_keep_mask(metric.float(), 4, 4).all()


def test_gfpo_keep_out_of_range():
    metric = torch.zeros(8)
    with pytest.raises(ValueError, match="keep"):
        gfpo_keep_mask(metric, 4, 5)
    with pytest.raises(ValueError, match="keep"):
        gfpo_keep_mask(metric, 4, 0)
    with pytest.raises(ValueError, match="multiple"):
        gfpo_keep_mask(metric, 3, 1)
