"""The trainer's side of a text run's sampling rounds: the responses arrive on a channel (``ResponsePart``s, one per
generation worker, or one assembled multi-turn round), the driver sends only their scores, and the trainer picks
the groups it trains on, as the embodied actor does with its trajectories.

``RoundInbox`` takes one round's parts off the channel (later rounds' parts are held for their own update; earlier
rounds' and superseded attempts' are dropped and counted). ``GroupSelection`` keeps groups over the sampling rounds
of one update: all of them, or, with dynamic sampling's resample-to-fill (DAPO), only the informative ones (not
every response of the group scored the same) until ``wanted`` groups are in hand.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from embodied_rl.algorithms.filters import dynamic_sampling_mask
from embodied_rl.runtime.channel import ChannelTimeout
from embodied_rl.workers.messages import TEXT_ROUNDS_KEY, ResponsePart


class RoundInbox:
    """The parts of text sampling rounds, read from ``channel`` at ``TEXT_ROUNDS_KEY``."""

    def __init__(self, channel, timeout_s: float, name: str):
        self.channel, self.timeout_s, self.name = channel, timeout_s, name
        self.held: list[ResponsePart] = []  # parts of rounds not yet asked for
        self.dropped = 0  # parts of earlier rounds, or superseded attempts
        self.received = 0
        channel.subscribe(TEXT_ROUNDS_KEY)

    def take(self, round_id: int, attempts: dict[int, int]) -> list[dict]:
        """Round ``round_id``'s rows, parts in order: part ``p`` as sent by its attempt ``attempts[p]``. Raises
        ``TimeoutError`` naming the missing parts when they do not all arrive within ``timeout_s``."""
        parts: dict[int, ResponsePart] = {}
        waiting, self.held = self.held, []
        deadline = time.monotonic() + self.timeout_s
        while True:
            for item in waiting:
                self._sort(item, round_id, attempts, parts)
            if len(parts) == len(attempts):
                return [row for p in sorted(parts) for row in parts[p].rows]
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise ChannelTimeout
                waiting = self.channel.get_batch(TEXT_ROUNDS_KEY, timeout=remaining)
            except ChannelTimeout:
                missing = sorted(set(attempts) - set(parts))
                raise TimeoutError(f"{self.name}: parts {missing} of text sampling round {round_id} did not arrive "
                                   f"on key {TEXT_ROUNDS_KEY!r} within {self.timeout_s:g} s") from None
            self.received += len(waiting)

    def _sort(self, item: ResponsePart, round_id: int, attempts: dict[int, int], parts: dict) -> None:
        if item.round_id > round_id:
            self.held.append(item)
        elif item.round_id == round_id and attempts.get(item.part) == item.attempt and item.part not in parts:
            parts[item.part] = item
        else:
            self.dropped += 1


class GroupSelection:
    """Groups of ``group_size`` rows kept for one update over its sampling rounds."""

    def __init__(self, group_size: int):
        self.group_size = group_size
        self.rows: list[dict] = []
        self.scores: list[float] = []
        self.last_round: tuple[list, list] = ([], [])

    def clear(self) -> None:
        self.rows, self.scores, self.last_round = [], [], ([], [])

    def add(self, rows: list[dict], scores: list[float], fill: bool) -> None:
        """A round's rows (group-contiguous) and scores: every group, or with ``fill`` the informative ones."""
        if len(rows) != len(scores) or len(rows) % self.group_size:
            raise ValueError(f"a text round of {len(rows)} responses and {len(scores)} scores is not whole groups "
                             f"of {self.group_size}")
        G = self.group_size
        informative = dynamic_sampling_mask(torch.as_tensor(np.asarray(scores, dtype=float)), G)[::G].tolist()
        for g in range(len(rows) // G):
            if not fill or informative[g]:
                self.rows.extend(rows[g * G:(g + 1) * G])
                self.scores.extend(float(s) for s in scores[g * G:(g + 1) * G])
        self.last_round = (rows, [float(s) for s in scores])

    @property
    def groups(self) -> int:
        return len(self.scores) // self.group_size

    def batch(self, wanted: int) -> tuple[list[dict], list[float], int]:
        """``(rows, scores, groups)``: the first ``wanted`` groups kept; where none was (every round's groups
        scored alike), the last round's, which the loss's own mask then drops."""
        if not self.rows:
            rows, scores = self.last_round
            return rows, scores, 0
        n = wanted * self.group_size
        return self.rows[:n], self.scores[:n], min(self.groups, wanted)


def training_lengths(rows: list[dict]) -> dict:
    """Response lengths and truncation of the responses an update trains on."""
    lengths = np.array([len(r["token_ids"]) for r in rows], float)
    return {"train/response_length_std": float(lengths.std()), "train/response_length_max": float(lengths.max()),
            "train/truncated_fraction": float(np.mean([not r["finished"] for r in rows]))}


class RoundTrainer:
    """The LM actor's update on sampling rounds from the channel (mixed into ``LMActorWorker``, which gives
    ``engine``, ``address``, ``algorithm`` and ``rl_update``). Rank 0 reads the channel and selects; the other
    data-parallel (or tensor-parallel) ranks get its batch, or its error, by the engine's ``broadcast_object``."""

    def open_rounds(self, channel, timeout_s: float) -> None:
        """Read rounds from ``channel`` (rank 0 only), waiting at most ``timeout_s`` for a round's parts."""
        self.inbox = RoundInbox(channel, timeout_s, f"LM actor {self.address}") if self.engine.rank == 0 else None
        self.selection = GroupSelection(self.algorithm.group_size)
        self.counted = (0, 0)  # the inbox's (received, dropped) as the last update began

    def rl_update_round(self, round_id: int, attempts: dict[int, int], scores: list[float], selection: dict,
                        lr: float, temperature: float, update_rounds: int = 1, num_minibatches: int = 1,
                        max_grad_norm: float = 1.0) -> dict:
        """Take round ``round_id`` (``attempts``: part -> the attempt the driver got its answers from) with its
        ``scores`` (group-contiguous, the parts' rows in order), keep its groups (``selection``: ``first`` round of
        an update, ``fill`` (keep informative groups only), ``last`` (no further round will come), ``wanted``
        groups), and once ``wanted`` groups are kept or the round is the last, run ``rl_update`` on them.
        Returns ``train/needs_more`` 1 (another round first) or the update's metrics, with the channel's counts
        since the last update (``channel/text_parts_received``, ``channel/text_parts_dropped``: parts of earlier
        rounds, or superseded attempts) and the trained rows' lengths and oldest ``policy_version``."""
        if selection.get("first"):
            self.selection.clear()
        taken = None
        if self.engine.rank == 0:
            try:
                taken = self._select_round(round_id, attempts, scores, selection)
            except Exception as error:  # the other ranks must not wait in a collective for rows that will not come
                taken = error
        if self.engine.distributed:
            taken = self.engine.broadcast_object(taken)
        if isinstance(taken, Exception):
            raise taken
        counts = taken["counts"]
        if taken["rows"] is None:
            return {"train/needs_more": 1, **counts}
        rows = taken["rows"]
        batch = {key: [row[key] for row in rows] for key in ("prompt_ids", "token_ids", "logprobs")}
        batch["scores"] = taken["scores"]
        if all("loss_mask" in row for row in rows):
            batch["loss_mask"] = [row["loss_mask"] for row in rows]
        metrics = self.rl_update(batch, lr, temperature, update_rounds, num_minibatches, max_grad_norm)
        return {**metrics, **counts, **training_lengths(rows), "train/batch_groups": taken["groups"],
                "train/oldest_policy_version": min(int(row["policy_version"]) for row in rows)}

    def _select_round(self, round_id: int, attempts: dict[int, int], scores: list[float], selection: dict) -> dict:
        rows = self.inbox.take(round_id, {int(p): int(a) for p, a in attempts.items()})
        self.selection.add(rows, scores, bool(selection.get("fill")))
        received, dropped = self.counted
        counts = {"channel/text_parts_received": self.inbox.received - received,
                  "channel/text_parts_dropped": self.inbox.dropped - dropped,
                  "train/kept_groups": self.selection.groups}
        wanted = int(selection["wanted"])
        if self.selection.groups < wanted and not selection.get("last"):
            return {"rows": None, "counts": counts}
        rows, kept_scores, groups = self.selection.batch(wanted)
        self.selection.clear()
        self.counted = (self.inbox.received, self.inbox.dropped)
        return {"rows": rows, "scores": kept_scores, "groups": groups, "counts": counts}
