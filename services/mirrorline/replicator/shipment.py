"""What one produce of a partition carries: records the record path batched itself, or one
source batch the batch path forwards as it is.

Both kinds travel through the same pump, in source order, and are acknowledged,
bookkept and measured the same way: a `Shipment` answers where it starts and ends in the
source, how many records it holds and their timestamps, whichever kind it is. A source
batch is contiguous (batches with compaction gaps take the record path), so its records
sit at every offset from its base to its last, and one target base offset places them all.
A source batch the target refuses as it is, or whose delivery must be checked on the
target, is decoded (`records()`) and handled as records from then on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mirrorline.core.batches import HEADER_SIZE, Batch, BatchHeader
from mirrorline.kafka.rawrecords import decode_batch
from mirrorline.kafka.records import Record

__all__ = ["Shipment", "SourceBatch"]


@dataclass(frozen=True, slots=True)
class SourceBatch:
    """A fetched source batch on its way to the target as it is (the batch path)."""

    batch: Batch
    topic: str
    partition: int

    @property
    def header(self) -> BatchHeader:
        header = self.batch.header
        assert header is not None, "only magic-2 batches take the batch path"
        return header

    def records(self) -> list[Record]:
        """Its records, decoded (the consumer's view of them)."""
        return list(decode_batch(self.batch, self.header.base_offset, self.topic,
                                 self.partition))


@dataclass(frozen=True, slots=True)
class Shipment:
    """Exactly one of `records` (the record path) and `batch` (the batch path)."""

    records: Sequence[Record] | None = None
    batch: SourceBatch | None = None

    @property
    def first_offset(self) -> int:
        if self.batch is not None:
            return self.batch.header.base_offset
        assert self.records
        return self.records[0].offset

    @property
    def last_offset(self) -> int:
        if self.batch is not None:
            return self.batch.header.last_offset
        assert self.records
        return self.records[-1].offset

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def count(self) -> int:
        if self.batch is not None:
            return self.batch.header.record_count
        assert self.records is not None
        return len(self.records)

    def offsets(self) -> Sequence[int]:
        """Source offset of every record, in order."""
        first, last = self.first_offset, self.last_offset
        if self.batch is not None or last - first + 1 == self.count:
            return range(first, last + 1)
        assert self.records is not None
        return [r.offset for r in self.records]

    @property
    def min_timestamp(self) -> int:
        if self.batch is not None:
            return self.batch.header.base_timestamp
        assert self.records
        return min(r.timestamp for r in self.records)

    @property
    def max_timestamp(self) -> int:
        if self.batch is not None:
            return self.batch.header.max_timestamp
        assert self.records
        return max(r.timestamp for r in self.records)

    @property
    def last_timestamp(self) -> int:
        """The last record's timestamp (a source batch's newest: its header's maximum)."""
        if self.batch is not None:
            return self.batch.header.max_timestamp
        assert self.records
        return self.records[-1].timestamp

    @property
    def payload_bytes(self) -> int:
        """A source batch's records section as sent (compressed, where it is)."""
        if self.batch is not None:
            return len(self.batch.batch.data) - HEADER_SIZE
        assert self.records is not None
        return sum(len(r.value) for r in self.records if r.value is not None)

    def as_records(self) -> list[Record]:
        if self.batch is not None:
            return self.batch.records()
        assert self.records is not None
        return list(self.records)
