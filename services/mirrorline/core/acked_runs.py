"""Where acknowledged records landed, as runs a bookkeeper can take (pure).

The replicator sends one produce batch per partition at a time, so an acknowledged batch
always lands on consecutive target offsets. A Spark writer task produces a whole
micro-batch of one partition through librdkafka in many batches; should anything else
write to the same target partition meanwhile, its records land between ours. Offset syncs
and the offset map describe "upstream offset u landed at downstream offset d" as runs with
consecutive downstream offsets, so a micro-batch's acknowledgements are cut wherever the
downstream offsets jump.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["AckedRun", "acked_runs"]


@dataclass(frozen=True)
class AckedRun:
    """Upstream offsets (increasing) written to `downstream_base`, `downstream_base + 1`, ..."""

    upstream: Sequence[int]
    downstream_base: int

    @property
    def next_offset(self) -> int:
        """The source offset after the run: where a restart continues."""
        return self.upstream[-1] + 1


def acked_runs(upstream: Sequence[int], downstream: Sequence[int]) -> list[AckedRun]:
    """Cut parallel lists of upstream and downstream offsets (in produce order) into runs of
    consecutive downstream offsets.

    Raises ValueError when the lists differ in length or either goes backwards: that would
    mean acknowledgements out of produce order, and recording them would map offsets wrongly.
    """
    if len(upstream) != len(downstream):
        raise ValueError(f"{len(upstream)} upstream offsets but {len(downstream)} downstream")
    runs: list[AckedRun] = []
    start = 0
    for i in range(1, len(upstream) + 1):
        if i < len(upstream):
            if upstream[i] <= upstream[i - 1] or downstream[i] <= downstream[i - 1]:
                raise ValueError(f"offsets out of order at index {i}: upstream "
                                 f"{upstream[i - 1]}->{upstream[i]}, downstream "
                                 f"{downstream[i - 1]}->{downstream[i]}")
            if downstream[i] == downstream[i - 1] + 1:
                continue
        runs.append(AckedRun(upstream[start:i], downstream[start]))
        start = i
    return runs
