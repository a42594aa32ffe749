"""Where acknowledged records landed, as runs a bookkeeper can take (pure).

The replicator sends one produce batch per partition at a time, so an acknowledged batch
always lands on consecutive target offsets. A Spark writer task produces a whole
micro-batch of one partition through librdkafka in many batches; should anything else
write to the same target partition meanwhile, its records land between ours, and the
source may have gaps (compaction, transaction markers). Offset syncs and the offset map
describe "upstream offset u landed at downstream offset d", so a micro-batch's
acknowledgements travel as runs `(upstream_start, count, downstream_start)` in which both
sides are consecutive, cut wherever either side jumps.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["OffsetRun", "extend_runs", "offset_runs", "run_offsets"]

#: (first upstream offset, number of records, downstream offset of the first record)
OffsetRun = tuple[int, int, int]


def offset_runs(upstream: Sequence[int], downstream: Sequence[int]) -> list[OffsetRun]:
    """Cut parallel lists of upstream and downstream offsets (in produce order) into runs.

    Raises ValueError when the lists differ in length or either goes backwards: that would
    mean acknowledgements out of produce order, and recording them would map offsets wrongly.
    """
    if len(upstream) != len(downstream):
        raise ValueError(f"{len(upstream)} upstream offsets but {len(downstream)} downstream")
    runs: list[OffsetRun] = []
    start = 0
    for i in range(1, len(upstream) + 1):
        if i < len(upstream):
            up_step, down_step = upstream[i] - upstream[i - 1], downstream[i] - downstream[i - 1]
            if up_step <= 0 or down_step <= 0:
                raise ValueError(f"offsets out of order at index {i}: upstream "
                                 f"{upstream[i - 1]}->{upstream[i]}, downstream "
                                 f"{downstream[i - 1]}->{downstream[i]}")
            if up_step == 1 and down_step == 1:
                continue
        runs.append((upstream[start], i - start, downstream[start]))
        start = i
    return runs


def run_offsets(run: OffsetRun) -> range:
    """The upstream offsets of one run."""
    first, count, _ = run
    return range(first, first + count)


def extend_runs(runs: list[OffsetRun], more: Sequence[OffsetRun]) -> None:
    """Append `more` (later in produce order) to `runs`, joining a run that continues the
    last one on both sides (batches acknowledged one after the other)."""
    for run in more:
        if runs:
            first, count, down = runs[-1]
            if run[0] == first + count and run[2] == down + count:
                runs[-1] = (first, count + run[1], down)
                continue
        runs.append(run)
