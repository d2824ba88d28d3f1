"""``cpus_per_worker``: the CPU slots each worker asks Ray for fit on the nodes ``placement.nodes`` pins them to."""

import pytest

from embodied_rl.runners.setup import cpus_per_worker

TWO_NODES = {"head": 4.0, "other": 4.0}


def demand_by_node(counts, pinned_to, share):
    demand = {}
    for component, count in counts.items():
        for rank in range(count):
            node = pinned_to[component][rank % len(pinned_to[component])]
            demand[node] = demand.get(node, 0.0) + share
    return demand


def test_unpinned_workers_split_the_cluster_evenly():
    counts = {"env": 2, "rollout": 1, "actor": 1}
    assert cpus_per_worker(counts, dict.fromkeys(counts), TWO_NODES) == pytest.approx(2.0)
    assert cpus_per_worker(counts, dict.fromkeys(counts), TWO_NODES, cluster_share=0.5) == pytest.approx(1.0)


def test_one_env_worker_alone_on_a_node_leaves_room_for_rollout_and_actor_on_the_other():
    """An even split of 8 slots among 3 workers (2.67 each) puts 5.33 on the learner node of 4: the actor would
    wait unplaced until the start deadline (the two-node camera run that never logged an iteration)."""
    counts = {"env": 1, "rollout": 1, "actor": 1}
    pinned_to = {"env": ["other"], "rollout": ["head"], "actor": ["head"]}
    share = cpus_per_worker(counts, pinned_to, TWO_NODES)
    assert share == pytest.approx(2.0)
    assert all(demand <= TWO_NODES[node] for node, demand in demand_by_node(counts, pinned_to, share).items())


def test_unpinned_workers_count_against_every_pinned_node():
    counts = {"env": 3, "rollout": 1, "actor": 1}
    pinned_to = {"env": ["other"], "rollout": None, "actor": None}
    # 3 pinned env workers plus 2 that may land on the same node: 4 / 5 each.
    assert cpus_per_worker(counts, pinned_to, TWO_NODES) == pytest.approx(0.8)


def test_a_group_spread_over_nodes_counts_its_ranks_round_robin():
    counts = {"env": 3, "rollout": 0, "actor": 0}
    pinned_to = {"env": ["head", "other"], "rollout": None, "actor": None}
    assert cpus_per_worker(counts, pinned_to, {"head": 2.0, "other": 8.0}) == pytest.approx(1.0)  # 2 ranks on head


@pytest.mark.parametrize("algorithm, setting, threads", [("ppo", None, 2), ("sac", None, 1), ("sft", 1, 1),
                                                         ("sac", 3, 3)])
def test_actor_threads_follow_the_learner_unless_placement_sets_them(algorithm, setting, threads):
    from embodied_rl.config.loader import load_train_config
    from embodied_rl.runners.setup import actor_torch_threads

    overrides = [f"algorithm.name={algorithm}", "stages=[]"] + ([f"placement.actor_threads={setting}"] if setting else [])
    if algorithm == "sac":
        overrides.append("policy.name=mlp_sac")
    assert actor_torch_threads(load_train_config("maniskill_pushcube", None, overrides)) == threads
