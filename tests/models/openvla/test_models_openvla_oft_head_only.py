"""OpenVLA-OFT with ``train_action_head_only``: a real GRPO update through the actor worker (no Ray) leaves the
vision tower, projectors, LM and action queries bit for bit and moves the L1 head and its std; without the option
the trunk moves too. The weight sync sends the trained entries only and a checkpoint resumes into a fresh actor."""

import numpy as np
import pytest
import torch

from embodied_rl.algorithms.embodied.grpo import GroupConfig
from embodied_rl.models import build_policy
from embodied_rl.workers.actor_worker import ActorWorker
from openvla_helpers import ACTION_DIM, SHAPES, make_obs, make_policy
from tests.tests_helpers import ListChannel, acted_round

pytestmark = pytest.mark.usefixtures("one_torch_thread")
T, B = 2, 4  # one episode of 2 decisions per env, 2 groups of 2
HEADS = ("action_head.", "action_log_std", "critic_head.")
TRUNK = ("vision_backbone.", "projector.", "language_model.", "proprio_projector.", "action_queries")


def _spec(head_only: bool) -> dict:
    return dict(name="openvla_oft", obs_dim=5, action_dim=ACTION_DIM, hidden_sizes=[16], obs_shapes=SHAPES,
                action_chunk=2, action_head="l1_regression", init_log_std=-1.0, train_action_head_only=head_only)


def _actor(head_only: bool, seed: int = 1) -> ActorWorker:
    config = GroupConfig(name="grpo", group_size=2, score="return", num_minibatches=1, update_epochs=3, lr=1e-2,
                         target_kl=None)
    return ActorWorker(policy=_spec(head_only), algorithm=config, channel=ListChannel(), seed=seed, group="actor",
                       rank=0, world_size=1)


def _one_update(actor: ActorWorker) -> tuple[dict, dict]:
    """``(weights before, weights after)`` of one GRPO update on a round the actor's policy sampled."""
    before = {k: v.clone() for k, v in actor.get_weights()[0].items()}
    actor.channel.items = [acted_round(actor.policy, make_obs(T * B, seed=4), T, B)]
    metrics = actor.update(1, 0.0, False, 1, [0])
    assert metrics["train/needs_more"] == 0 and metrics["train/gradient_steps"] == 3
    return before, actor.get_weights()[0]


def _moved(before: dict, after: dict, prefixes) -> list[str]:
    return [k for k in after if k.startswith(prefixes) and not torch.equal(after[k], before[k])]


def test_head_only_keeps_the_trunk_bit_for_bit_and_trains_the_l1_head(capsys):
    actor = _actor(head_only=True)
    trained = {n for n, p in actor.policy.named_parameters() if p.requires_grad}
    assert trained == {n for n, _ in actor.policy.named_parameters() if n.startswith(HEADS)} and trained
    optimized = {id(p) for group in actor.optimizer.param_groups for p in group["params"]}
    assert optimized == {id(p) for n, p in actor.policy.named_parameters() if n in trained}
    count = sum(p.numel() for n, p in actor.policy.named_parameters() if n in trained)
    assert f"{count:,} parameters trained, {sum(p.numel() for p in actor.policy.parameters()) - count:,} frozen" \
        in capsys.readouterr().err

    before, after = _one_update(actor)
    trunk = [k for k in after if k.startswith(TRUNK)]
    assert trunk and all(torch.equal(after[k], before[k]) for k in trunk)
    assert _moved(before, after, "action_head.") and _moved(before, after, "action_log_std")

    synced = actor.get_weights(only_trained=True)[0]
    assert not any(k.startswith(TRUNK) for k in synced) and any(k.startswith("action_head.") for k in synced)
    resumed = _actor(head_only=True, seed=7)
    state = actor.training_state()
    resumed.load_training_state(state["weights"], state["trainer_state"])
    assert all(torch.equal(v, after[k]) for k, v in resumed.get_weights()[0].items())


def test_without_the_option_the_trunk_moves_too():
    before, after = _one_update(_actor(head_only=False))
    assert _moved(before, after, ("language_model.",)) and _moved(before, after, ("vision_backbone.",))
    assert _moved(before, after, ("action_head.",))


def test_head_only_gives_the_same_policy_and_is_refused_with_lora_or_non_bool():
    obs = make_obs(4)
    plain, head_only = build_policy(**_spec(False)), build_policy(**_spec(True))
    head_only.load_state_dict(plain.state_dict())
    torch.testing.assert_close(head_only._regress(obs)[0], plain._regress(obs)[0])
    with pytest.raises(ValueError, match="train_action_head_only=true is not allowed with lora_rank=4"):
        make_policy("openvla_oft", action_head="l1_regression", train_action_head_only=True, lora_rank=4)
    with pytest.raises(ValueError, match="train_action_head_only='yes' is not allowed"):
        make_policy("openvla_oft", action_head="l1_regression", train_action_head_only="yes")


def test_grpo_moves_the_regressed_chunk_towards_the_samples_that_score_higher():
    """A bandit through the real update: each group of 2 samples from one observation scores the negative distance
    of its sampled (normalised) chunk to a target; GRPO updates of the head alone bring the regressed chunk closer."""
    actor = _actor(head_only=True)
    obs = {k: np.repeat(v, 2, axis=0) if isinstance(v, np.ndarray) else v.repeat_interleave(2, 0)
           for k, v in make_obs(4, seed=5).items()}  # 4 groups of 2 envs, one observation each
    target = torch.full((8, 2 * ACTION_DIM), 0.5)

    def distance() -> float:
        with torch.no_grad():
            return (actor.policy._regress(obs)[0] - target).norm(dim=-1).mean().item()

    before = distance()
    def score(stored):  # the closer the sampled chunk to the target, the higher
        return -(stored["stored.normalized_actions"] - target).norm(dim=-1).numpy()

    for version in range(1, 6):
        actor.channel.items = [acted_round(actor.policy, obs, 1, 8, rewards=score, sampling_round=version,
                                           policy_version=version - 1)]
        assert actor.update(1, 0.0, False, version, [0])["train/gradient_steps"] == 3
    assert distance() < before - 0.05, (before, distance())
