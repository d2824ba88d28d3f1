"""Held-out figures of text runs, against hand-computed values: pass@k, mean@k and maj@k of k samples per problem,
truncation and response lengths."""

import pytest

from embodied_rl.runners.heldout_metrics import greedy_summary, sampled_summary, training_lengths


def test_pass_mean_and_majority_at_k():
    # 3 problems x k=3: [right, wrong, wrong] with answers [7, 8, 8] -> majority 8 is wrong; [wrong x3] none right;
    # [right, right, wrong] with answers [5, 5, None] -> majority 5 right
    rows = {"correct": [True, False, False, False, False, False, True, True, False],
            "extracted": ["7", "8", "8", "1", "2", None, "5", "5", None]}
    assert sampled_summary(rows, 3) == {"eval/pass_at_3": pytest.approx(2 / 3), "eval/mean_at_3": pytest.approx(3 / 9),
                                        "eval/maj_at_3": pytest.approx(1 / 3)}


def test_a_tied_vote_goes_to_the_first_drawn_answer_and_no_answer_is_wrong():
    rows = {"correct": [False, True, False, False], "extracted": ["3", "4", None, None]}
    assert sampled_summary(rows, 2) == {"eval/pass_at_2": 0.5, "eval/mean_at_2": 0.25, "eval/maj_at_2": 0.0}


def test_truncation_and_lengths():
    answers = [{"token_ids": [1] * 4, "finished": True}, {"token_ids": [1] * 8, "finished": False}]
    summary = greedy_summary({"correct": [True, False], "formatted": [True, True]}, answers)
    assert summary == {"eval/heldout_accuracy": 0.5, "eval/heldout_formatted": 1.0, "eval/problems": 2,
                       "eval/truncated_fraction": 0.5, "eval/response_length": 6.0, "eval/response_length_std": 2.0}
    assert training_lengths(answers) == {"train/response_length_std": 2.0, "train/response_length_max": 8.0,
                                         "train/truncated_fraction": 0.5}
