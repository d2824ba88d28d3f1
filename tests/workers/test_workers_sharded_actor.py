"""The embodied actor sharded by FSDP2 over 2 gloo CPU processes (``actor.backend=fsdp``) trains like one process.

2 ranks run as subprocesses of this file as a script; every rank builds the same ``ActorWorker`` (no Ray) around a
tiny OpenVLA-OFT with LoRA, and rank 0 alone is given each round's trajectories (the others get them from it). They
run SFT (micro-batches of 3 over slices of 4 and 3 rows), a PPO update with token ratios and decoupled correction,
and GRPO with a KL term to the reference policy (a sharded frozen copy) over 3 updates, the third both straight on
and after a resume from the training state of the second. Rank 0 writes the weights and metrics, which must equal
a single-process worker's (float32: bf16 autocast rounds each slice's batch shape differently). Rank 1's rows
weighted half as much as rank 0's move the weights by ~1e-2 (a factor on every rank alike would not show: Adam and
gradient clipping do not see the gradient's scale).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.tests_helpers import ListChannel, start_rank_processes, wait_rank_processes

pytestmark = pytest.mark.slow  # ~40 s: 3 processes building tiny VLAs and training them
T, B, ENV_RANKS = 4, 3, 2  # steps and envs of each trajectory, env workers per round


def spec() -> dict:
    from tests.models.openvla.openvla_helpers import ACTION_DIM, SHAPES

    return dict(name="openvla_oft", obs_dim=5, action_dim=ACTION_DIM, hidden_sizes=[32], obs_shapes=SHAPES,
                action_chunk=2, lora_rank=4)


def trajectories(sampling_round: int, weights: dict) -> list:
    """One round of ``ENV_RANKS`` trajectories ``[T, B]``, acted by a policy holding ``weights``; each env's
    episode is the whole trajectory (truncated at its last step), rewards random."""
    from embodied_rl.models import build_policy
    from embodied_rl.workers.messages import Trajectory
    from embodied_rl.workers.weights import load_host_weights
    from tests.models.openvla.openvla_helpers import make_obs

    sampler = build_policy(**spec())
    load_host_weights(sampler, weights)
    items = []
    for env_rank in range(ENV_RANKS):
        obs = make_obs(T * B, seed=10 * sampling_round + env_rank)
        with torch.no_grad():
            actions, logp, values, *stored = sampler.act(obs)
        arrays = {k: v.numpy() if torch.is_tensor(v) else v for k, v in obs.items()}
        arrays.update({k: v.numpy() for k, v in (stored[0] if stored else {}).items()})
        rng = np.random.default_rng(100 * sampling_round + env_rank)
        zeros = np.zeros((T, B), np.float32)
        truncated = np.zeros((T, B), bool)
        truncated[-1] = True
        items.append(Trajectory(
            obs={k: v.reshape(T, B, *v.shape[1:]) for k, v in arrays.items()},
            actions=actions.numpy().reshape(T, B, *actions.shape[1:]), logp=logp.numpy().reshape(T, B) - 0.02,
            values=values.numpy().reshape(T, B), rewards=rng.standard_normal((T, B)).astype(np.float32),
            terminated=zeros.astype(bool), truncated=truncated, success=zeros.astype(bool), final_values=zeros,
            next_value=np.zeros(B, np.float32), policy_versions=np.full(T, sampling_round - 1, np.int64),
            env_rank=env_rank, sampling_round=sampling_round))
    return items


def train(parallel: dict | None) -> tuple[dict | None, list[dict]]:
    """``(weights, metrics)`` on rank 0 (``(None, metrics)`` elsewhere) after SFT, PPO and GRPO (module doc)."""
    from embodied_rl.algorithms.embodied.grpo import GroupConfig
    from embodied_rl.algorithms.embodied.ppo import PPOConfig
    from embodied_rl.algorithms.embodied.sft import SFTConfig
    from embodied_rl.workers.actor_worker import ActorWorker
    from tests.models.openvla.openvla_helpers import make_obs

    torch.set_num_threads(1)
    rank, world_size = (parallel or {}).get("rank", 0), (parallel or {}).get("world_size", 1)

    def worker(algorithm):
        return ActorWorker(policy=spec(), algorithm=algorithm, channel=ListChannel(), seed=3, micro_batch_size=3,
                           data_parallel=parallel, group="actor", rank=rank, world_size=world_size)

    def shared(weights):  # rank 0's weights reach the others as the runner's calls would bring them
        return worker_engine.broadcast_object(weights)

    def update(actor, sampling_round: int, weights: dict) -> dict:
        if rank == 0:
            actor.channel.items = trajectories(sampling_round, weights)
        return actor.update(ENV_RANKS, 0.5, False, sampling_round, list(range(ENV_RANKS)))

    sft = worker(SFTConfig(batch_size=7, gradient_steps=4, lr=1e-3))
    worker_engine = sft.engine
    obs = make_obs(12)
    demos = np.random.default_rng(0).uniform(-1, 1, (12, 2, 3)).astype(np.float32)
    sft.load_demonstrations({"obs": {k: v.numpy() if torch.is_tensor(v) else v for k, v in obs.items()},
                             "actions": demos})
    metrics = [sft.sft_update(2), sft.sft_update(2)]
    weights = shared(sft.get_weights())[0]

    ppo = worker(PPOConfig(num_minibatches=2, update_epochs=2, normalize_advantages=True, ratio_level="token",
                           off_policy_correction="decoupled", lr=1e-3))
    ppo.load_training_state(weights, None)
    ppo.algorithm.updates = 1  # past the critic's warm-up update
    metrics.append(update(ppo, 1, weights))
    weights = shared(ppo.get_weights())[0]

    grpo_config = GroupConfig(name="grpo", group_size=2, score="return", kl_coef=0.1, num_minibatches=2,
                              update_epochs=1, lr=1e-3)
    grpo = worker(grpo_config)
    grpo.load_training_state(weights, None)
    for sampling_round in (2, 3):
        metrics.append(update(grpo, sampling_round, weights))
        weights = shared(grpo.get_weights())[0]
    state = shared(grpo.training_state())
    metrics.append(update(grpo, 4, weights))
    final = grpo.get_weights()
    adapters = grpo.get_weights(only_trained=True)  # a later sync: only the trained entries are gathered
    if rank == 0:
        assert 0 < len(adapters[0]) < len(final[0]) and any("lora_" in k for k in adapters[0])
        assert all(torch.equal(v, final[0][k]) for k, v in adapters[0].items())

    resumed = worker(grpo_config)
    resumed.load_training_state(state["weights"], state["trainer_state"])
    metrics.append(update(resumed, 4, weights))
    again = resumed.get_weights()
    if rank == 0:
        assert set(again[0]) == set(final[0])
        for name, value in final[0].items():
            assert torch.equal(again[0][name], value), f"the resumed update differs at {name}"
    sft.engine.close()
    return (None if final is None else final[0]), metrics


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from embodied_rl.engines.training.data_parallel import serve_rendezvous

    out = tmp_path_factory.mktemp("sharded_actor")
    store = serve_rendezvous(timeout_s=120)
    ranks = start_rank_processes(__file__, 2, store.port, out)
    try:
        weights, metrics = train(None)
    finally:
        wait_rank_processes(ranks)
    return (weights, metrics), out


COMPARED = ["train/sft_loss", "train/policy_loss", "train/value_loss", "train/approx_kl", "train/kl_to_reference",
            "train/gradient_steps", "train/score_mean", "train/transitions"]


def test_two_fsdp_ranks_train_a_vla_like_one_process_and_resume_exactly(runs):
    (expected, expected_metrics), out = runs
    weights = torch.load(out / "weights.pt")
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(weights) == set(expected)
    moved = [k for k in expected if k.startswith("language_model") and "lora" in k]
    assert moved, "the LoRA adapters of the language model are trained"
    worst = max(float((weights[k].float() - expected[k].float()).abs().max()) for k in expected)
    assert worst < 1e-5, f"largest weight difference from one process {worst:.3g}"
    assert len(metrics) == len(expected_metrics) == 7
    for got, want in zip(metrics, expected_metrics):
        compared = [key for key in COMPARED if key in want]
        assert compared
        for key in compared:
            assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key


def test_rank_passes_are_as_many_on_every_rank_and_cover_each_slice():
    from embodied_rl.workers.micro_batches import rank_passes

    counts = [4, 3]
    assert rank_passes(7, counts, 0, 3) == [slice(0, 2), slice(2, 4)]
    assert rank_passes(7, counts, 1, 3) == [slice(4, 6), slice(6, 7)]
    assert rank_passes(7, counts, 1, None) == [slice(4, 7)]
    assert rank_passes(1, [1, 0], 1, None) == [slice(1, 1)]  # nothing of its own: one empty pass all the same


def rank_main(rank: int, world_size: int, port: int, out: Path) -> None:
    weights, metrics = train(dict(backend="fsdp", rank=rank, world_size=world_size, master_address="127.0.0.1",
                                  master_port=port, served_store=True, timeout_s=120))
    assert (weights is None) == (rank != 0), "rank 0 alone returns the weights"
    if rank == 0:
        torch.save(weights, out / "weights.pt")
        (out / "metrics.json").write_text(json.dumps(metrics))


if __name__ == "__main__":
    import faulthandler

    faulthandler.dump_traceback_later(240, exit=True)  # a hung rank prints where it hangs before the test kills it
    rank_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
