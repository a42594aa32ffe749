"""Sticky, load-aware assignment of source partitions to replicator workers.

The controller assigns every source partition of every replication flow to one replicator
worker itself, rather than letting a Kafka consumer group do it, so that a worker or a topic
that comes or goes never triggers a rebalance storm. Operators have been hurt by tools that
answer every change by reshuffling everything: each moved partition means a consumer torn down
on one worker and built up on another, a pause in replication, and records re-sent from the
last committed offset. This module therefore tries to move as little as possible:

* **Sticky.** A partition stays with its current owner as long as that worker is alive. Only
  partitions that are new, or whose worker is gone, are placed; they go one by one, heaviest
  first, to the worker with the lowest load (ties: fewest partitions, then worker id).
* **Load-aware.** Workers are balanced by measured load in bytes/s, not by partition count: one
  hot partition can cost as much as a hundred idle ones. A partition without a measurement
  (missing, zero, negative or not finite) counts as the mean of the positive measurements, or as
  1.0 when nothing is measured at all, so without measurements the balance is by count.
* **Fewest moves.** Only when `allow_moves` is set are existing partitions moved for balance,
  and only while a worker is outside ``fair share * (1 ± tolerance)``: each step moves
  one partition from a loaded worker to the least loaded one, choosing the partition that
  brings the two closest together, and only if the step strictly lowers the larger of the two
  loads. An imbalance smaller than every partition on the loaded worker cannot be fixed by
  moving whole partitions, so it is left alone. The band keeps noisy measurements from moving
  partitions back and forth between periodic reviews.
* **Unsplittable partitions.** A partition heavier than the mean cannot be split. The fair share
  is therefore computed without it: such a partition ends up alone on one worker and the others
  balance among themselves. Moving it never lowers the larger load, so it is never bounced
  between workers. Every move strictly lowers the sum of squared worker loads, which is why the
  rebalance always terminates.

`allow_moves` is the controller's policy knob: it passes True only when the set of workers
changes or on its periodic load review, and False otherwise, so adding a topic (or partitions)
places the new partitions on the least loaded workers and never moves an existing one.
`receivers` narrows the moves further: when workers join, only they receive partitions, so a
join never shuffles partitions between workers that were already there (their measured loads
may still be skewed by a recent hand-over's catch-up); evening those out is the periodic
review's job.

Everything is deterministic: inputs are sorted, ties are broken by worker id and partition key,
and loads are summed exactly (as integers scaled from the float measurements), so the same
inputs always give the same result and running `assign` on its own result changes nothing.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

__all__ = [
    "DEFAULT_TOLERANCE",
    "PartitionKey",
    "assign",
    "moves",
    "worker_loads",
]

DEFAULT_TOLERANCE: Final = 0.15


@dataclass(frozen=True, order=True)
class PartitionKey:
    """One source partition of one replication flow."""

    flow: str  # "source->target"
    topic: str
    partition: int


def _weights(
    partitions: Iterable[PartitionKey], loads: Mapping[PartitionKey, float] | None
) -> tuple[dict[PartitionKey, int], int]:
    """Exact integer weight of each partition, and the scale: bytes/s = weight / scale.

    Floats are dyadic rationals, so scaling every measurement to a common power-of-two
    denominator, times the number of measurements (which makes their mean an integer too),
    gives exact integers: sums and comparisons then never depend on the order of additions.
    """
    parts = sorted(set(partitions))
    measured: dict[PartitionKey, tuple[int, int]] = {}
    if loads:
        for p in parts:
            value = loads.get(p)
            if value is not None and math.isfinite(value) and value > 0:
                measured[p] = float(value).as_integer_ratio()
    if not measured:
        return dict.fromkeys(parts, 1), 1
    denominator = max(d for _, d in measured.values())  # powers of two: the max is the lcm
    count = len(measured)
    scaled = {p: n * (denominator // d) for p, (n, d) in measured.items()}
    unmeasured = sum(scaled.values())  # = mean * count * denominator
    weights = {p: scaled[p] * count if p in scaled else unmeasured for p in parts}
    return weights, denominator * count


def _fair_share(weights: Iterable[int], worker_count: int) -> Fraction:
    """The mean load per worker once partitions too heavy to share a worker are set aside.

    A partition heavier than the mean of what is left takes a worker of its own; the remaining
    load is spread over the remaining workers. Without heavy partitions this is the plain mean.
    """
    remaining = sorted(weights, reverse=True)
    total = sum(remaining)
    workers = worker_count
    for w in remaining:
        if workers <= 1 or w * workers <= total:
            break
        total -= w
        workers -= 1
    return Fraction(total, workers)


class _State:
    """Loads, counts and weight-sorted partitions of every worker during an assignment."""

    def __init__(self, workers: list[str], weights: Mapping[PartitionKey, int]) -> None:
        self.workers = workers
        self.weights = weights
        self.owner: dict[PartitionKey, str] = {}
        self.load = dict.fromkeys(workers, 0)
        self.held: dict[str, list[tuple[int, PartitionKey]]] = {w: [] for w in workers}

    def add(self, p: PartitionKey, worker: str) -> None:
        w = self.weights[p]
        self.owner[p] = worker
        self.load[worker] += w
        held = self.held[worker]
        held.insert(bisect_left(held, (w, p)), (w, p))

    def remove(self, p: PartitionKey) -> str:
        worker = self.owner.pop(p)
        w = self.weights[p]
        self.load[worker] -= w
        held = self.held[worker]
        del held[bisect_left(held, (w, p))]
        return worker

    def count(self, worker: str) -> int:
        return len(self.held[worker])

    def place(self, partitions: list[PartitionKey]) -> None:
        """Put each partition, heaviest first, on the least loaded worker."""
        heap = [(self.load[w], self.count(w), w) for w in self.workers]
        heapq.heapify(heap)
        for p in sorted(partitions, key=lambda p: (-self.weights[p], p)):
            _, _, worker = heap[0]
            self.add(p, worker)
            heapq.heapreplace(heap, (self.load[worker], self.count(worker), worker))

    def best_move(self, donor: str, gap: int) -> PartitionKey | None:
        """The partition of `donor` lighter than `gap` whose weight is closest to gap / 2.

        Moving it to a worker `gap` below `donor` strictly lowers the larger of the two loads
        and leaves them as close together as one move can. Ties: the lighter one, then the
        smallest key.
        """
        held = self.held[donor]
        if not held or held[0][0] >= gap:
            return None
        i = bisect_right(held, gap // 2, key=lambda item: item[0])  # held[:i]: 2 * w <= gap
        candidates: list[int] = []
        if i > 0:
            candidates.append(held[i - 1][0])
        if i < len(held) and held[i][0] < gap:
            candidates.append(held[i][0])
        w = min(candidates, key=lambda c: (abs(gap - 2 * c), c))
        return held[bisect_left(held, w, key=lambda item: item[0])][1]

    def rebalance(self, tolerance: Fraction, receivers: list[str]) -> None:
        """Move partitions to the least loaded of `receivers` while a worker is outside the
        band."""
        fair = _fair_share(self.weights.values(), len(self.workers))
        upper = fair * (1 + tolerance)
        lower = fair * (1 - tolerance)
        while receivers:
            receiver = min(receivers, key=lambda w: (self.load[w], self.count(w), w))
            floor = self.load[receiver]
            donors = sorted(self.workers, key=lambda w: (-self.load[w], -self.count(w), w))
            if floor >= lower:  # nobody is too light: only workers above the band give
                donors = [w for w in donors if self.load[w] > upper]
            for donor in donors:
                p = self.best_move(donor, self.load[donor] - floor)
                if p is not None:
                    self.remove(p)
                    self.add(p, receiver)
                    break
            else:
                return


def assign(
    current: Mapping[PartitionKey, str],
    partitions: Collection[PartitionKey],
    workers: Collection[str],
    loads: Mapping[PartitionKey, float] | None = None,
    *,
    allow_moves: bool = True,
    tolerance: float = DEFAULT_TOLERANCE,
    receivers: Collection[str] | None = None,
) -> dict[PartitionKey, str]:
    """The owner of every partition in `partitions`, keeping `current` owners where possible.

    `current` may name partitions that no longer exist (dropped) and workers that are gone
    (their partitions are placed again). `loads` are bytes/s per partition. With `allow_moves`
    the result is rebalanced until every worker is within `tolerance` (a fraction of the fair
    share) or no single move helps; without it, only new and orphaned partitions are placed.
    `receivers` (default: every worker) are the only workers a move may go to.
    The result is ordered by partition key.
    """
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    live = sorted(set(workers))
    if not live:
        return {}
    weights, _ = _weights(partitions, loads)
    state = _State(live, weights)
    unplaced: list[PartitionKey] = []
    for p in weights:  # sorted
        owner = current.get(p)
        if owner is not None and owner in state.load:
            state.add(p, owner)
        else:
            unplaced.append(p)
    state.place(unplaced)
    if allow_moves:
        state.rebalance(Fraction(tolerance), live if receivers is None
                        else sorted(set(receivers) & set(live)))
    return {p: state.owner[p] for p in weights}


def moves(
    old: Mapping[PartitionKey, str], new: Mapping[PartitionKey, str]
) -> dict[PartitionKey, tuple[str | None, str]]:
    """Partition -> (previous owner or None, new owner) for every partition of `new` whose
    owner changed or that is new, ordered by partition key."""
    return {p: (old.get(p), new[p]) for p in sorted(new) if old.get(p) != new[p]}


def worker_loads(
    assignment: Mapping[PartitionKey, str],
    loads: Mapping[PartitionKey, float] | None,
    workers: Collection[str],
) -> dict[str, float]:
    """Load in bytes/s of each of `workers` (ordered by id) under `assignment`.

    Unmeasured partitions count as `assign` counts them (the mean of the positive measurements
    among the assigned partitions, or 1.0). Partitions of workers not listed are ignored.
    """
    weights, scale = _weights(assignment, loads)
    totals = dict.fromkeys(sorted(set(workers)), 0)
    for p, w in weights.items():
        owner = assignment[p]
        if owner in totals:
            totals[owner] += w
    return {worker: total / scale for worker, total in totals.items()}
