"""Each GRPO-family algorithm's composition (advantages, filters, shaping, ratio level, clip, aggregation, TIS,
KL) checked against values worked out by hand."""

import math

import pytest
import torch

from embodied_rl.algorithms.text_rl import TextRLConfig, advantages, loss

SCORES = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1])  # two groups of 4; the second carries no signal
LENGTHS = torch.tensor([5, 1, 2, 3, 4, 4, 4, 4])


def _adv(name, **kw):
    return advantages(SCORES, LENGTHS, TextRLConfig(name=name, group_size=4, **kw))


def test_grpo_normalises_by_the_unbiased_group_std():
    adv, keep, _ = _adv("grpo")
    # group 1: mean 0.25, unbiased std 0.5 -> [1.5, -0.5, -0.5, -0.5]; group 2: all equal -> 0
    assert adv.tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0], abs=1e-5) and keep.all()


def test_dr_grpo_only_centres_and_rloo_leaves_one_out():
    assert _adv("dr_grpo")[0].tolist()[:4] == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert _adv("rloo")[0].tolist()[:4] == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])


def test_reinforce_pp_normalises_over_the_whole_batch():
    std = math.sqrt((5 * 0.375 ** 2 + 3 * 0.625 ** 2) / 7)
    adv = _adv("reinforce_pp")[0]
    assert adv[0].item() == pytest.approx(0.375 / std, rel=1e-5) and adv[1].item() == pytest.approx(-0.625 / std,
                                                                                                    rel=1e-5)


def test_dapo_drops_uninformative_groups():
    adv, keep, metrics = _adv("dapo")
    assert keep.tolist() == [True] * 4 + [False] * 4 and metrics["train/informative_fraction"] == 0.5
    assert adv[:4].tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)


def test_gfpo_keeps_the_shortest_and_normalises_among_them():
    adv, keep, _ = _adv("gfpo", gfpo_keep=2)
    # group 1 keeps lengths 1 and 2 (scores 0, 0) -> 0; group 2 keeps two 4s with equal scores -> 0
    assert keep.tolist()[:4] == [False, True, True, False]
    scores = torch.tensor([1.0, 0, 1, 0])  # kept (lengths 1, 2): scores 0 and 1 -> -/+ 1/sqrt(2) (unbiased std)
    adv, keep, _ = advantages(scores, torch.tensor([5, 1, 2, 3]), TextRLConfig(name="gfpo", group_size=4,
                                                                              gfpo_keep=2))
    assert adv.tolist() == pytest.approx([0, -1 / math.sqrt(2), 1 / math.sqrt(2), 0], abs=1e-5)


def test_overlong_shaping_lowers_the_scores_of_long_responses():
    scores, lengths = torch.tensor([1.0, 1.0, 1.0, 0.0]), torch.tensor([5, 8, 12, 5])
    config = TextRLConfig(name="dr_grpo", group_size=4, overlong_max_len=10, overlong_cache=4)
    adv, _, metrics = advantages(scores, lengths, config)
    shaped = torch.tensor([1.0, 0.5, 0.0, 0.0])  # penalties 0, -0.5, -1, 0
    assert adv.tolist() == pytest.approx((shaped - shaped.mean()).tolist())
    assert metrics["reward/overlong_penalty"] == pytest.approx(-1.5 / 4)


OLD = torch.log(torch.tensor([[0.5, 0.5]]))
NEW = OLD + torch.log(torch.tensor([[1.5, 1.0]]))  # token ratios 1.5 and 1.0
MASK = torch.ones(1, 2)


@pytest.mark.parametrize("name, expected", [
    ("grpo", -(1.2 + 1.0) / 2),  # token ratios, 1.5 clipped to 1.2
    ("dapo", -(1.28 + 1.0) / 2),  # clip-higher 0.28
    ("gspo", -1.0004),  # one ratio sqrt(1.5) for the sequence, clipped to 1 + 4e-4
])
def test_the_clipped_surrogate_at_each_algorithms_level_and_range(name, expected):
    value, metrics = loss(NEW, OLD, MASK, torch.tensor([1.0]), TextRLConfig(name=name, group_size=1))
    assert value.item() == pytest.approx(expected, rel=1e-5)


def test_tis_weights_the_tokens_by_the_capped_trainer_over_rollout_ratio():
    rollout = torch.log(torch.tensor([[0.25, 0.5]]))  # trainer/rollout: 2 (capped at 1.5) and 1
    config = TextRLConfig(name="grpo", group_size=1, tis_cap=1.5)
    value, metrics = loss(OLD.clone(), OLD, MASK, torch.tensor([1.0]), config, rollout_logp=rollout)
    assert value.item() == pytest.approx(-(1.5 + 1.0) / 2) and metrics["tis_weight_mean"] == pytest.approx(1.25)


def test_kl_to_the_reference_is_added_with_its_weight():
    config = TextRLConfig(name="grpo", group_size=1, kl_coef=0.5, kl_kind="k1")
    value, metrics = loss(OLD.clone(), OLD, MASK, torch.tensor([0.0]), config, ref_logp=OLD - 0.2)
    assert metrics["kl_to_reference"] == pytest.approx(0.2) and value.item() == pytest.approx(0.1)


def test_bad_settings_are_named():
    assert {k for k, _, _ in TextRLConfig(name="ppo2").problems()} == {"name"}
    assert {k for k, _, _ in TextRLConfig(name="rloo", group_size=1, kl_kind="k9").problems()} == {"group_size",
                                                                                                  "kl_kind"}
