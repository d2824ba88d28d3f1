"""The one training loop's schedule, on a side that records what it was asked (the worlds' own sides run in the
embodied and reasoning runner tests): sampling rounds until the update has enough, a round sampled beside each
update in overlap mode and trained by the next iteration, syncs only after complete updates, evaluations, the
best checkpoint and early stops on their schedule."""

import contextlib

import pytest

from embodied_rl.runners.loop import Round, Schedule, TrainingLoop


class RecordingSide:
    """Iteration budget ``iterations``; ``needs_more``: per update call, whether it asks for another round;
    ``scores``: per evaluation."""

    samples = True

    def __init__(self, iterations: int, overlap: bool, needs_more=(), scores=(), tie_wins=()):
        self.iteration, self.overlap, self.best_score = 0, overlap, None
        self.iterations, self.needs_more, self.scores = iterations, list(needs_more), list(scores)
        self.tie_wins = list(tie_wins)  # per tie with the best score, whether the new evaluation wins it
        self.calls: list[tuple] = []
        self.rows: list[dict] = []
        self.clock = 0.0

    def ends(self, iteration):
        return iteration >= self.iterations

    def can_sample_more(self):
        return True

    def begin_iteration(self):
        self.calls.append(("begin",))
        return {}

    def start_sampling(self, iteration, sampling_round):
        self.calls.append(("start", iteration, sampling_round))
        return (iteration, sampling_round)

    def finish_sampling(self, pending):
        self.calls.append(("finish", *pending))
        return Round(pending, 10.0 * pending[0], 10.0 * pending[0] + 5.0)

    def training_turn(self, holder):
        return contextlib.nullcontext()

    def start_update(self, sampled):
        self.calls.append(("update", sampled.data))
        return sampled

    def finish_update(self, handle):
        return {"train/needs_more": self.needs_more.pop(0) if self.needs_more else False}

    def sync(self):
        self.calls.append(("sync",))

    def iteration_metrics(self, metrics):
        return {}

    def evaluate(self, final):
        self.calls.append(("evaluate",))
        return {"eval/score": self.scores.pop(0)}

    def score(self, evaluation):
        return evaluation["eval/score"]

    def breaks_tie(self, evaluation):
        self.calls.append(("tie",))
        return self.tie_wins.pop(0)

    def record(self, metrics, log):
        self.rows.append(dict(metrics))

    def save(self, final, best=False):
        self.calls.append(("save", "best" if best else "final" if final else "every"))


def test_a_synchronous_iteration_samples_until_the_update_has_enough_and_syncs_once():
    side = RecordingSide(2, overlap=False, needs_more=[True, False, False], scores=[0.5])
    TrainingLoop(side, Schedule()).run()
    assert side.calls == [("begin",), ("start", 0, 0), ("finish", 0, 0), ("update", (0, 0)),
                          ("start", 0, 1), ("finish", 0, 1), ("update", (0, 1)), ("sync",),
                          ("begin",), ("start", 1, 0), ("finish", 1, 0), ("update", (1, 0)), ("sync",),
                          ("evaluate",), ("save", "best"), ("save", "final")]
    assert [r["train/sampling_rounds"] for r in side.rows] == [2, 1] and side.iteration == 2
    assert all(r["time/overlap_s"] == 0.0 for r in side.rows)


def test_overlap_samples_the_next_round_beside_the_update_and_trains_it_next():
    side = RecordingSide(3, overlap=True, scores=[0.1])
    TrainingLoop(side, Schedule()).run()
    updates = [c for c in side.calls if c[0] in ("start", "update", "sync")]
    assert updates == [("start", 0, 0), ("update", (0, 0)), ("start", 1, 0), ("sync",),
                       ("update", (1, 0)), ("start", 2, 0), ("sync",), ("update", (2, 0)), ("sync",)]
    # the round beside each update is finished before that update's sync: nothing in flight between iterations
    assert side.calls.index(("finish", 1, 0)) < side.calls.index(("sync",))
    assert [r["time/sample_started_at"] for r in side.rows[:-1]] == [10.0, 20.0]
    assert "time/sample_started_at" not in side.rows[-1] and side.rows[-1]["time/overlap_s"] == 0.0


def test_the_best_checkpoint_follows_the_score_and_stop_at_ends_the_run_with_a_final_checkpoint():
    side = RecordingSide(10, overlap=False, scores=[0.2, 0.1, 0.6, 0.9])
    loop = TrainingLoop(side, Schedule(eval_every=1, stop_at=0.5))
    loop.run()
    saves = [c for c in side.calls if c[0] in ("evaluate", "save")]
    assert saves == [("evaluate",), ("save", "best"), ("evaluate",), ("evaluate",), ("save", "best"),
                     ("save", "final")]
    assert loop.stopped and side.iteration == 3 and side.best_score == pytest.approx(0.6)


def test_an_evaluation_tying_the_best_score_replaces_the_best_checkpoint_only_where_it_wins_the_tie():
    side = RecordingSide(4, overlap=False, scores=[0.5, 0.5, 0.5, 0.4], tie_wins=[False, True])
    TrainingLoop(side, Schedule(eval_every=1)).run()
    saves = [c for c in side.calls if c[0] in ("evaluate", "save", "tie")]
    assert saves == [("evaluate",), ("save", "best"), ("evaluate",), ("tie",), ("evaluate",), ("tie",),
                     ("save", "best"), ("evaluate",), ("save", "final")]


def test_checkpoints_and_logs_follow_their_schedule():
    side = RecordingSide(4, overlap=False, scores=[0.0])
    side.rows = []
    logged = []
    side.record = lambda metrics, log: logged.append(log)
    TrainingLoop(side, Schedule(checkpoint_every=2, log_every=3)).run()
    assert [c[1] for c in side.calls if c[0] == "save"] == ["every", "best", "final"]
    assert logged == [False, False, True, True]
