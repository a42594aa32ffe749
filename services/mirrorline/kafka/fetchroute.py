"""One partition's raw fetch answer, batch by batch: forwarded as it is, or its records.

The per-batch decision of the batch path, shared by the replicator
(`replicator/batchfetch.cut`) and the Spark executor's read tasks
(`mirrorline_spark.batchread`): each data batch goes where `core.batches.route` and the
partition's `core.copy_path.PathChooser` send it. Control batches, emptied ones and, under
read_committed, aborted transactions are left out (fetching continues past them); a batch
that cannot or should not go as it is -- or that the fetch position falls inside -- is
decoded as the consumer decodes it (`kafka/rawrecords.decode_batch`), and says why.

`end` (Spark: a micro-batch's range) stops at that offset: a batch running past it yields
only its records before it, decoded, and fetching continues at `end`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mirrorline.core.batches import AbortedTransactions, Batch, Path, Reason, route, split
from mirrorline.core.copy_path import PathChooser
from mirrorline.kafka.rawbatches import FetchedPartition
from mirrorline.kafka.rawrecords import decode_batch

__all__ = ["ENDS_INSIDE", "RESUMING_INSIDE", "FetchRoute", "Routed", "route_fetch"]

#: Why a batch the batch path would forward goes as records.
RESUMING_INSIDE = "resuming inside a source batch"
ENDS_INSIDE = "the micro-batch ends inside a source batch"


@dataclass(frozen=True, slots=True)
class Routed:
    """A data batch of the answer: forwarded as it is (`records` None), or these records
    of it (the record path); `reason` says why, in status's words."""

    batch: Batch
    records: list[Any] | None
    reason: str


@dataclass
class FetchRoute:
    batches: list[Routed] = field(default_factory=list)
    #: Where fetching continues (past batches left out).
    next_offset: int = 0


def route_fetch(fetched: FetchedPartition, topic: str, partition: int, position: int,
                chooser: PathChooser, *, read_committed: bool, max_request_size: int,
                end: int | None = None) -> FetchRoute:
    """The data batches of the answer to a fetch of `topic`-`partition` at `position`,
    each forwarded or decoded, in order, and where fetching continues."""
    aborted = AbortedTransactions(fetched.aborted_transactions) if read_committed else None
    out = FetchRoute([], position)
    for batch in split(fetched.records).batches:
        is_aborted = aborted.is_aborted(batch) if aborted is not None else False
        header = batch.header
        if end is not None and (batch.base_offset >= end or out.next_offset >= end):
            break
        if header is not None and header.next_offset <= position:
            continue  # before the position (a fetch answers from the batch holding it)
        decision = route(batch, aborted=is_aborted, target_max_message_bytes=max_request_size)
        if decision.path is Path.SKIP:
            assert header is not None
            out.next_offset = max(out.next_offset, header.next_offset)
            continue
        if header is not None:
            chooser.observe(header.record_count, header.size)
        whole = end is None or (header is not None and header.next_offset <= end)
        if (decision.path is Path.BATCH and chooser.batches and batch.base_offset >= position
                and whole):
            assert header is not None
            out.batches.append(Routed(batch, None, chooser.reason))
            out.next_offset = header.next_offset
            continue
        decoded = decode_batch(batch, position, topic, partition)
        if end is not None:
            decoded = [r for r in decoded if r.offset < end]
        out.batches.append(Routed(batch, list(decoded), (
            decision.reason.value if decision.reason is not Reason.COPY
            else RESUMING_INSIDE if batch.base_offset < position
            else ENDS_INSIDE if not whole
            else chooser.reason)))
        if header is not None:
            out.next_offset = max(out.next_offset, header.next_offset)
            if end is not None:
                out.next_offset = min(out.next_offset, end)
        elif decoded:
            out.next_offset = max(out.next_offset, decoded[-1].offset + 1)
    return out
