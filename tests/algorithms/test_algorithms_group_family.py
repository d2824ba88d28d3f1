"""One GRPO family for text and embodied tasks: the same names and defaults in both worlds, every member's
advantages on episodes, the aggregation weights against ``aggregate_loss``, GSPO's one ratio per episode."""

import math

import pytest
import torch

from embodied_rl.algorithms.embodied import ALGORITHMS
from embodied_rl.algorithms.embodied.grpo import (EPISODE, GroupConfig, GroupRelative, aggregation_weights,
                                                  sequence_log_ratio)
from embodied_rl.algorithms.group_family import FAMILY
from embodied_rl.algorithms.losses import AGG_MODES, aggregate_loss
from embodied_rl.algorithms.text_rl import TextRLConfig


def test_every_member_is_one_registered_algorithm_for_both_worlds_with_the_same_defaults():
    for name in FAMILY:
        assert ALGORITHMS.get(name) is GroupRelative and "text" in GroupRelative.worlds
        embodied, text = GroupConfig(name=name), TextRLConfig(name=name)
        for key in ("clip_low", "clip_high", "loss_agg", "dynamic_sampling"):
            assert embodied.setting(key) == text.setting(key), (name, key)
        assert (embodied.setting("ratio_level") == "sequence") == (text.setting("ratio_level") == "sequence")
    assert GroupConfig(name="gspo").setting("ratio_level") == "sequence"
    assert GroupConfig(name="grpo").setting("ratio_level") == "decision"
    assert GroupConfig(name="dapo", clip_high=0.5).setting("clip_high") == 0.5  # an explicit key wins
    assert ("name", "ppo") == next(TextRLConfig(name="ppo").problems())[:2]  # PPO is not a text algorithm


@pytest.mark.parametrize("agg", AGG_MODES)
def test_aggregation_weights_turn_the_mean_over_trained_steps_into_each_loss_agg(agg):
    torch.manual_seed(0)
    x = torch.randn(6, 5)
    valid = torch.rand(6, 5) > 0.4
    valid[0] = False  # an episode with no trained step
    w = aggregation_weights(valid, agg)
    assert (w * x)[valid].mean().item() == pytest.approx(aggregate_loss(x, valid, agg).item(), rel=1e-5)
    assert (w[~valid] == 0).all()


def _batch(success_steps, L=4):
    """One episode slot per env, lock-step: env b succeeds first at ``success_steps[b]`` (None: never)."""
    B = len(success_steps)
    success = torch.zeros(L, B, dtype=torch.bool)
    for b, step in enumerate(success_steps):
        if step is not None:
            success[step:, b] = True
    done = torch.zeros(L, B, dtype=torch.bool)
    done[-1] = True
    obs = (10 * torch.arange(L)[:, None] + torch.arange(B)[None, :]).float()[..., None]
    return dict(obs=obs, actions=obs.clone(), logp=torch.zeros(L, B), rewards=torch.zeros(L, B),
                terminated=torch.zeros(L, B, dtype=torch.bool), truncated=done, success=success)


def _advantages(name, success_steps, **kw):
    algorithm = GroupRelative(GroupConfig(name=name, group_size=4, loss_agg="token-mean", **kw))
    selected, metrics = algorithm.select(_batch(success_steps))
    samples, _ = algorithm.prepare([selected])
    # first trained step of each episode -> its advantage
    per_episode = {}
    for e, a in zip(samples[EPISODE].tolist(), samples["advantages"].tolist()):
        per_episode.setdefault(e, a)
    return per_episode, metrics


def test_each_member_scores_episodes_as_on_text():
    # group of 4 (scores 1, 1, 0, 0 at first-success steps 0, 2, -, -) and a group that all failed
    steps = [0, 2, None, None, None, None, None, None]
    grpo, _ = _advantages("grpo", steps)
    s = math.sqrt(1 / 3)  # unbiased std of (1, 1, 0, 0)
    assert [grpo[e] for e in range(4)] == pytest.approx([0.5 / s, 0.5 / s, -0.5 / s, -0.5 / s], abs=1e-4)
    assert [grpo[e] for e in range(4, 8)] == [0, 0, 0, 0]  # no dynamic sampling: the flat group stays, at 0
    dr, _ = _advantages("dr_grpo", steps)
    assert [dr[e] for e in range(4)] == pytest.approx([0.5, 0.5, -0.5, -0.5])
    rloo, _ = _advantages("rloo", steps)
    assert [rloo[e] for e in range(4)] == pytest.approx([2 / 3, 2 / 3, -2 / 3, -2 / 3])
    pp, _ = _advantages("reinforce_pp", steps)
    batch_std = math.sqrt((2 * 0.75 ** 2 + 6 * 0.25 ** 2) / 7)  # scores 1, 1, 0 x 6 over the batch
    assert pp[0] == pytest.approx(0.75 / batch_std, rel=1e-4) and pp[7] == pytest.approx(-0.25 / batch_std, rel=1e-4)
    dapo, metrics = _advantages("dapo", steps)
    assert sorted(dapo) == [0, 1, 2, 3] and metrics["train/informative_fraction"] == 0.5
    # GFPO keeps the 2 episodes of each group with the fewest trained steps: env 0 (1 step) and env 1 (3 steps)
    # succeed, both kept (equal scores -> 0); a group whose quickest are a success and a failure is split by them
    gfpo, _ = _advantages("gfpo", [0, None, None, None, None, None, None, None], gfpo_keep=2)
    assert gfpo[0] == pytest.approx(1 / math.sqrt(2), abs=1e-4) and gfpo[1] == pytest.approx(-1 / math.sqrt(2),
                                                                                             abs=1e-4)
    assert 2 not in gfpo and 3 not in gfpo  # the slower two of the group are not trained


def test_gspo_takes_one_ratio_per_episode_and_keeps_episodes_together_in_minibatches():
    log_ratio = torch.tensor([0.1, 0.3, -0.2, 0.0, 0.4])
    episode = torch.tensor([5, 5, 2, 2, 2])
    assert sequence_log_ratio(log_ratio, episode)[:, 0].tolist() == pytest.approx([0.2, 0.2, 0.2 / 3, 0.2 / 3,
                                                                                   0.2 / 3])
    algorithm = GroupRelative(GroupConfig(name="gspo", group_size=2))
    samples = {"old_logp": torch.zeros(7), EPISODE: torch.tensor([0, 0, 0, 1, 1, 2, 2])}
    order = algorithm.minibatch_order(samples, torch.Generator().manual_seed(0))
    runs = [samples[EPISODE][i].item() for i in order]
    assert sorted(order.tolist()) == list(range(7))
    assert sum(a != b for a, b in zip(runs, runs[1:])) == 2  # three episodes, each contiguous
    # the loss: ratio exp(mean log-ratio) per episode, clipped at GSPO's (3e-4, 4e-4)
    minibatch = dict(old_logp=torch.zeros(3), advantages=torch.tensor([1.0, 1.0, 1.0]),
                     **{EPISODE: torch.tensor([0, 0, 1])})
    outputs = dict(logp=torch.tensor([0.0002, 0.0, 0.001]), entropy=torch.zeros(3))
    loss, metrics = algorithm.loss(outputs, minibatch)
    r0, r1 = math.exp(0.0001), math.exp(0.001)  # episode 0 inside the clip range, episode 1 clipped at 1 + 4e-4
    assert r1 > 1 + 4e-4 and loss.item() == pytest.approx((-r0 - r0 - (1 + 4e-4)) / 3, rel=1e-6)
    assert metrics["clip_fraction"] == pytest.approx(1 / 3)
