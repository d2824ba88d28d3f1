"""Pi0 with ``train_expert_only`` (RLinf's): a real GRPO update through the actor worker (no Ray) leaves the VLM bit
for bit and moves the action expert; without the option the VLM moves too. Weight sync and checkpoints of such an
actor, and optimizer states saved while the groups held frozen parameters too."""

import pytest
import torch

import embodied_rl.models.pi0  # noqa: F401  (registers pi0)
from embodied_rl.algorithms.embodied.grpo import GroupConfig
from embodied_rl.models import build_policy
from embodied_rl.workers.actor_worker import ActorWorker
from embodied_rl.workers.optimizer_groups import parameter_groups, renumbered_optimizer_state
from embodied_rl.workers.weights import load_host_weights
from pi0_helpers import observations
from tests.tests_helpers import ListChannel, acted_round

pytestmark = pytest.mark.usefixtures("one_torch_thread")
T, B = 2, 4  # one episode of 2 decisions per env, 2 groups of 2
VLM = "pi0.model.vlm."
EXPERT = "pi0.model.dit."


def _spec(expert_only: bool) -> dict:
    return dict(name="pi0", obs_dim=5, action_dim=4, hidden_sizes=[16], obs_shapes={"rgb": [32, 32, 3], "state": [5]},
                action_chunk=2, num_denoising_steps=3, train_expert_only=expert_only)


def _actor(expert_only: bool, seed: int = 1) -> ActorWorker:
    config = GroupConfig(name="grpo", group_size=2, score="return", num_minibatches=1, update_epochs=3, lr=1e-2,
                         target_kl=None)
    return ActorWorker(policy=_spec(expert_only), algorithm=config, channel=ListChannel(), seed=seed, group="actor",
                       rank=0, world_size=1)


def _one_update(actor: ActorWorker) -> tuple[dict, dict, dict]:
    """``(weights before, weights after, metrics)`` of one GRPO update on a round the actor's policy sampled."""
    before = {k: v.clone() for k, v in actor.get_weights()[0].items()}
    actor.channel.items = [acted_round(actor.policy, observations(batch=T * B, seed=4), T, B)]
    metrics = actor.update(1, 0.0, False, 1, [0])
    assert metrics["train/needs_more"] == 0 and metrics["train/gradient_steps"] == 3
    return before, actor.get_weights()[0], metrics


def _moved(before: dict, after: dict, prefix: str) -> list[str]:
    return [k for k in after if k.startswith(prefix) and not torch.equal(after[k], before[k])]


def test_expert_only_keeps_the_vlm_bit_for_bit_and_trains_the_expert(capsys):
    actor = _actor(expert_only=True)
    frozen = {n for n, p in actor.policy.named_parameters() if not p.requires_grad}
    assert frozen == {n for n, _ in actor.policy.named_parameters() if n.startswith(VLM)} and frozen
    optimized = {id(p) for group in actor.optimizer.param_groups for p in group["params"]}
    assert not any(id(p) in optimized for n, p in actor.policy.named_parameters() if n in frozen)
    trained = sum(p.numel() for n, p in actor.policy.named_parameters() if n not in frozen)
    assert f"{trained:,} parameters trained, {sum(p.numel() for p in actor.policy.parameters()) - trained:,} frozen" \
        in capsys.readouterr().err

    before, after, _ = _one_update(actor)
    assert all(torch.equal(after[k], before[k]) for k in after if k.startswith(VLM))
    assert _moved(before, after, EXPERT) and _moved(before, after, "pi0.action_out_proj.")

    # The weight sync after the first one sends the trained entries only; a sampler holding the same option takes
    # them, and the checkpoint resumes into a fresh actor.
    synced = actor.get_weights(only_trained=True)[0]
    assert not any(k.startswith(VLM) for k in synced) and any(k.startswith(EXPERT) for k in synced)
    sampler = build_policy(**_spec(True))
    load_host_weights(sampler, actor.get_weights()[0])
    load_host_weights(sampler, synced)
    resumed = _actor(expert_only=True, seed=7)
    state = actor.training_state()
    resumed.load_training_state(state["weights"], state["trainer_state"])
    assert all(torch.equal(v, after[k]) for k, v in resumed.get_weights()[0].items())


def test_without_the_option_the_vlm_moves_too():
    before, after, _ = _one_update(_actor(expert_only=False))
    assert _moved(before, after, VLM + "language_model.") and _moved(before, after, VLM + "vision_tower.")
    assert _moved(before, after, EXPERT)


def test_an_optimizer_state_saved_over_every_parameter_loads_into_the_trained_ones():
    """Checkpoints written while the groups held the frozen parameters too (a LoRA base) keep their Adam moments."""
    torch.manual_seed(0)
    policy = build_policy(**_spec(True))
    named = list(policy.named_parameters())
    old_groups = [{"params": [p for n, p in named if not n.startswith("critic")]},
                  {"params": [p for n, p in named if n.startswith("critic")]}]
    old = torch.optim.Adam(old_groups, lr=1e-3)
    for p in policy.parameters():
        if p.requires_grad:
            p.grad = torch.randn_like(p)
    old.step()
    groups = parameter_groups(policy)
    new = torch.optim.Adam(groups, lr=1e-3)
    new.load_state_dict(renumbered_optimizer_state(old.state_dict(), policy, new.param_groups))
    trained = [p for p in policy.parameters() if p.requires_grad]
    assert all(torch.equal(new.state[p]["exp_avg"], old.state[p]["exp_avg"]) for p in trained)
    assert len(new.state) == len(trained)
    same = new.state_dict()
    assert renumbered_optimizer_state(same, policy, new.param_groups) is same  # today's layout as it is
