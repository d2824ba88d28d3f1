"""The trainer's side of text sampling rounds: parts taken off a real channel by round and attempt, later rounds
held, stale ones dropped; groups kept by dynamic sampling's resample-to-fill, checked by hand."""

import pytest

from embodied_rl.runtime import Channel
from embodied_rl.workers.messages import TEXT_ROUNDS_KEY, ResponsePart
from embodied_rl.workers.text_rounds import GroupSelection, RoundInbox, training_lengths


def _rows(tag: str, n: int) -> list[dict]:
    return [{"tag": f"{tag}{i}"} for i in range(n)]


def test_a_round_is_its_parts_in_order_from_the_attempts_named(cluster):
    channel = Channel.create("text-rounds-test", cluster)
    inbox = RoundInbox(channel, timeout_s=5.0, name="test trainer")
    sent = [ResponsePart(0, 0, _rows("stale", 1)),            # an earlier round: dropped
            ResponsePart(1, 1, _rows("b", 2)),
            ResponsePart(2, 0, _rows("next", 1)),             # a later round: held for its own take
            ResponsePart(1, 0, _rows("dead", 2), attempt=0),  # sent by a worker that died before it returned
            ResponsePart(1, 0, _rows("a", 2), attempt=1)]     # its replacement's, which the driver names
    for part in sent:
        channel.put(part, TEXT_ROUNDS_KEY, timeout=10)
    rows = inbox.take(1, {0: 1, 1: 0})
    assert [r["tag"] for r in rows] == ["a0", "a1", "b0", "b1"]
    # round 1 was whole only once its last part came, so all five had arrived; round 2 comes from the held
    assert [r["tag"] for r in inbox.take(2, {0: 0})] == ["next0"]
    assert inbox.received == 5 and inbox.dropped == 2
    channel.put(ResponsePart(3, 0, _rows("c", 1)), TEXT_ROUNDS_KEY, timeout=10)
    inbox.timeout_s = 0.5
    with pytest.raises(TimeoutError, match=r"parts \[1\] of text sampling round 3 did not arrive"):
        inbox.take(3, {0: 0, 1: 0})


def test_resample_to_fill_keeps_informative_groups_until_enough():
    selection = GroupSelection(group_size=2)
    rows = _rows("r", 6)
    # groups [1, 1] (all alike: dropped), [0, 1] (kept), [0, 0] (dropped)
    selection.add(rows, [1.0, 1.0, 0.0, 1.0, 0.0, 0.0], fill=True)
    assert selection.groups == 1
    selection.add(_rows("s", 4), [0.5, 0.0, 1.0, 0.0], fill=True)
    kept, scores, groups = selection.batch(wanted=2)
    assert [r["tag"] for r in kept] == ["r2", "r3", "s0", "s1"] and scores == [0.0, 1.0, 0.5, 0.0] and groups == 2
    # without fill every group is kept, alike or not
    every = GroupSelection(group_size=2)
    every.add(rows, [1.0, 1.0, 0.0, 1.0, 0.0, 0.0], fill=False)
    assert every.batch(wanted=3)[2] == 3
    # no informative group in any round: the last round as it came (the loss's own mask drops it), 0 groups
    none = GroupSelection(group_size=2)
    none.add(rows, [1.0] * 6, fill=True)
    assert none.batch(wanted=3) == (rows, [1.0] * 6, 0)
    with pytest.raises(ValueError, match="not whole groups of 2"):
        none.add(_rows("t", 3), [0.0] * 3, fill=True)


def test_training_lengths_of_the_rows_trained_on():
    rows = [{"token_ids": [1, 2, 3], "finished": True}, {"token_ids": [1], "finished": False}]
    assert training_lengths(rows) == {"train/response_length_std": 1.0, "train/response_length_max": 3.0,
                                      "train/truncated_fraction": 0.5}
