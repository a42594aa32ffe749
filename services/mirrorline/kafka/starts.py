"""Where a new owner of a partition starts copying: the one place that decides it.

Every owner -- a replicator worker taking a partition, the Spark executor starting its
query, either after a hand-over -- calls `start_offsets`, so both paths resume exactly
where durable progress (`mm2-offsets.<source>.internal`) says, and a future refinement
(e.g. checking the target's tail) applies to both at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import TopicPartition


async def start_offsets(saved: Mapping[tuple[str, int], int], tps: Sequence[TopicPartition],
                        consumer: Any, auto_offset_reset: str) -> dict[TopicPartition, int]:
    """Saved progress where there is some; else the log start (`earliest`, the default)
    or the log end (`latest`), as the flow's `auto.offset.reset` says."""
    starts = {tp: saved[(tp.topic, tp.partition)] for tp in tps
              if (tp.topic, tp.partition) in saved}
    fresh = [tp for tp in tps if tp not in starts]
    if fresh:
        if auto_offset_reset.lower() == "latest":
            offsets = await consumer.end_offsets(fresh)
        else:
            offsets = await consumer.beginning_offsets(fresh)
        starts.update(offsets)
    return starts
