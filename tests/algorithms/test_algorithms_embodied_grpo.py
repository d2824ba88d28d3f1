"""The GRPO family on embodied tasks: episodes cut from lock-step batches, scores, per-group advantages on every step,
filtering, aggregation, sequence ratios."""

import pytest
import torch

from embodied_rl.algorithms.embodied.grpo import GroupConfig as GRPOConfig
from embodied_rl.algorithms.embodied.grpo import GroupRelative as GRPO
from embodied_rl.algorithms.embodied.grpo import episode_length, success_scores, to_episodes


def _batch(success_at: dict, T=4, B=4, L=2):
    """A lock-step batch: B envs, episodes of L steps; ``success_at[(episode, env)] = step`` where it succeeds."""
    done = torch.zeros(T, B, dtype=torch.bool)
    done[L - 1::L] = True
    success = torch.zeros(T, B, dtype=torch.bool)
    for (episode, env), step in success_at.items():
        success[episode * L + step, env] = True
    obs = (10 * torch.arange(T)[:, None] + torch.arange(B)[None, :]).float()[..., None]
    # obs value = 10 * t + b, to trace rows
    return dict(obs=obs, actions=obs.clone(), logp=torch.zeros(T, B), rewards=torch.ones(T, B),
                terminated=torch.zeros(T, B, dtype=torch.bool), truncated=done, success=success)


def test_episode_length_and_episode_major_group_contiguous_layout():
    batch = _batch({})
    assert episode_length(batch["truncated"]) == 2
    episodes = to_episodes(batch["obs"], 2)[..., 0]
    # Episode slot 0 of envs 0..3, then slot 1 of envs 0..3; each row holds that env's two steps.
    assert episodes.tolist() == [[0, 10], [1, 11], [2, 12], [3, 13], [20, 30], [21, 31], [22, 32], [23, 33]]


def test_unaligned_episodes_are_refused():
    batch = _batch({})
    batch["truncated"][1, 2] = False
    with pytest.raises(ValueError, match="lock-step"):
        episode_length(batch["truncated"])


def test_success_scores_and_steps_after_the_first_success_are_masked():
    success = torch.tensor([[False, True, False, True], [False, False, False, False]])
    scores, valid = success_scores(success)
    assert scores.tolist() == [1.0, 0.0]
    assert valid.tolist() == [[True, True, False, False], [True, True, True, True]]


def test_advantages_are_per_group_and_broadcast_to_every_trained_step():
    # Groups of 2 envs: (env 0, env 1) and (env 2, env 3). Episode slot 0: env 0 succeeds at step 0, env 2 at
    # step 1; slot 1: nobody succeeds (both groups uninformative, filtered out).
    algorithm = GRPO(GRPOConfig(group_size=2, dynamic_sampling=True, loss_agg="token-mean"))
    selected, metrics = algorithm.select(_batch({(0, 0): 0, (0, 2): 1}))
    assert metrics["train/groups_sampled"] == 4 and metrics["train/groups_kept"] == 2
    assert selected["scores"].tolist() == [1.0, 0.0, 1.0, 0.0]
    samples, _ = algorithm.prepare([selected])
    # Scores (1, 0) in a group: mean 0.5, std (unbiased) 0.7071 -> advantages +0.7071 / -0.7071.
    a = 0.5 / 0.5 ** 0.5
    # env 0 trains on its step 0 only (it succeeded there), env 1 on both steps, env 2 on steps 0-1, env 3 both.
    assert samples["obs"][:, 0].tolist() == [0, 1, 11, 2, 12, 3, 13]
    assert samples["advantages"] == pytest.approx(torch.tensor([a, -a, -a, a, a, -a, -a]), abs=1e-4)


def test_episode_weighting_gives_every_episode_the_same_weight():
    """The batch of the test above: 4 episodes with 1, 2, 2, 2 trained steps (7 in all). Per episode, each step's
    advantage is scaled by 7 / (4 * steps of its episode), so the loss's mean over steps is a mean over episodes:
    env 0's single step counts as much as env 1's two."""
    algorithm = GRPO(GRPOConfig(group_size=2, loss_agg="seq-mean-token-mean", dynamic_sampling=True))
    samples, _ = algorithm.prepare([algorithm.select(_batch({(0, 0): 0, (0, 2): 1}))[0]])
    a = 0.5 / 0.5 ** 0.5
    one, two = 7 / 4, 7 / 8
    assert samples["advantages"] == pytest.approx(
        torch.tensor([a * one, -a * two, -a * two, a * two, a * two, -a * two, -a * two]), abs=1e-4)
    # Per-episode sums of |weight|: equal for every episode, and the weights average to 1 over the steps.
    assert samples["advantages"].abs().sum() == pytest.approx(7 * a, abs=1e-4)
    assert any(p[0] == "loss_agg" for p in GRPOConfig(loss_agg="episode").problems())


def test_filtered_groups_ask_for_more_rounds_and_refill_up_to_one_round():
    algorithm = GRPO(GRPOConfig(group_size=2, max_sampling_rounds=3, dynamic_sampling=True))
    first, _ = algorithm.select(_batch({(0, 0): 0}))  # 1 of 4 groups informative
    assert not algorithm.enough([first], rounds=1)
    second, _ = algorithm.select(_batch({(0, 0): 0, (0, 2): 0, (1, 0): 1, (1, 3): 1}))  # 4 of 4
    assert algorithm.enough([first, second], rounds=2)
    samples, metrics = algorithm.prepare([first, second])
    assert metrics["train/groups_trained"] == 4  # one round's worth: 1 from the first round + 3 of the second
    assert algorithm.enough([first], rounds=3)  # the round limit ends the search


def test_loss_adds_the_kl_to_the_reference_policy_when_asked():
    logp = torch.tensor([-1.0, -2.0])
    minibatch = dict(old_logp=logp.clone(), advantages=torch.tensor([1.0, -1.0]), ref_logp=torch.tensor([-1.5, -2.0]))
    outputs = dict(logp=logp, entropy=torch.zeros(2))
    plain, _ = GRPO(GRPOConfig(kl_coef=0.0)).loss(outputs, minibatch)
    with_kl, metrics = GRPO(GRPOConfig(kl_coef=0.5, kl_kind="k1")).loss(outputs, minibatch)
    # ratio 1 everywhere: policy loss -(1 - 1) / 2 = 0; k1 = logp - ref_logp = [0.5, 0.0], mean 0.25.
    assert plain.item() == pytest.approx(0.0)
    assert metrics["kl_to_reference"] == pytest.approx(0.25)
    assert with_kl.item() == pytest.approx(0.5 * 0.25)
    assert GRPO.needs(GRPOConfig(kl_coef=0.5)).reference and not GRPO.needs(GRPOConfig()).reference


def test_camera_observations_with_instruction_strings_pass_through_selection():
    import numpy as np

    batch = _batch({(0, 0): 0})
    T, B = batch["obs"].shape[:2]
    batch["obs"] = {"state": batch["obs"], "instruction": np.full((T, B), "pick up the cube")}
    algorithm = GRPO(GRPOConfig(group_size=2, dynamic_sampling=True))
    selected, _ = algorithm.select(batch)
    samples, _ = algorithm.prepare([selected])
    assert samples["obs"]["state"][:, 0].tolist() == [0, 1, 11]  # env 0 up to its success, env 1 both steps
    assert isinstance(samples["obs"]["instruction"], np.ndarray) and len(samples["obs"]["instruction"]) == 3


def test_token_level_ratios_are_clipped_per_token_and_averaged_over_tokens():
    old = torch.tensor([[-1.0, -1.0], [-2.0, -2.0]])
    new = old + torch.log(torch.tensor([[1.5, 1.0], [1.0, 0.5]]))
    minibatch = dict(obs={"stored.token_logp": old}, old_logp=old.sum(-1), advantages=torch.tensor([1.0, -1.0]))
    outputs = dict(logp=new.sum(-1), token_logp=new, entropy=torch.zeros(2))
    token, token_metrics = GRPO(GRPOConfig(ratio_level="token", clip_high=0.28)).loss(outputs, minibatch)
    # per token: A=+1: max(-1.5, -1.28) = -1.28 and -1; A=-1: max(1, 1) = 1 and max(0.5, 0.8) = 0.8; mean -0.12
    assert token.item() == pytest.approx(-0.12)
    assert token_metrics["clip_fraction"] == pytest.approx(0.5)
    # per decision the ratios are the products 1.5 and 0.5: (-1.28 + 0.8) / 2, both clipped
    decision, decision_metrics = GRPO(GRPOConfig(clip_high=0.28)).loss({k: v for k, v in outputs.items() if k != "token_logp"},
                                                         minibatch)
    assert decision.item() == pytest.approx(-0.24)
    assert decision_metrics["clip_fraction"] == pytest.approx(1.0)


def test_token_level_evaluate_asks_the_policy_for_its_token_log_probs():
    class Policy:
        def evaluate_tokens(self, obs, actions):
            return torch.tensor([[-1.0, -2.0]]), torch.tensor([[0.5, 0.25]]), torch.tensor([3.0])

    outputs = GRPO(GRPOConfig(ratio_level="token")).evaluate(Policy(), dict(obs={}, actions=torch.zeros(1, 2)))
    assert torch.equal(outputs["token_logp"], torch.tensor([[-1.0, -2.0]]))
    assert outputs["logp"].item() == -3.0 and outputs["entropy"].item() == 0.75 and outputs["values"].item() == 3.0
    assert ("ratio_level", "word", "decision, token, sequence") in list(GRPOConfig(ratio_level="word").problems())


def test_return_to_go_scores_each_step_against_the_group_at_the_same_step():
    # One episode slot of 3 steps, 2 groups of 2 envs. Rewards per env (steps 0, 1, 2):
    #   env 0: 1, 0, 2 -> to go 3, 2, 2      env 1: 0, 1, 0 -> to go 1, 1, 0   (group 0)
    #   env 2: 1, 1, 1 -> to go 3, 2, 1      env 3: 1, 1, 1 -> to go 3, 2, 1   (group 1: identical, filtered)
    batch = _batch({}, T=3, B=4, L=3)
    batch["rewards"] = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 1.0], [2.0, 0.0, 1.0, 1.0]])
    algorithm = GRPO(GRPOConfig(name="dr_grpo", group_size=2, score="return_to_go", dynamic_sampling=True,
                                loss_agg="token-mean"))
    selected, metrics = algorithm.select(batch)
    assert metrics["train/groups_kept"] == 1
    samples, _ = algorithm.prepare([selected])
    # group 0, mean-centred per step: step 0 (3, 1) -> +1, -1; step 1 (2, 1) -> +0.5, -0.5; step 2 (2, 0) -> +1, -1
    assert samples["obs"][:, 0].tolist() == [0, 10, 20, 1, 11, 21]
    assert samples["advantages"].tolist() == pytest.approx([1.0, 0.5, 1.0, -1.0, -0.5, -1.0])
    # the episode's return alone would give every step of env 0 the same +1 (returns 3 and 1)
    dr_grpo = GRPO(GRPOConfig(name="dr_grpo", group_size=2, score="return", dynamic_sampling=True,
                                loss_agg="token-mean"))
    plain, _ = dr_grpo.prepare([dr_grpo.select(batch)[0]])
    assert plain["advantages"].tolist() == pytest.approx([1.0, 1.0, 1.0, -1.0, -1.0, -1.0])
