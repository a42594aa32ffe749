"""The records of a raw fetch (`kafka/rawbatches.py`), batch by batch, for a reader that
needs no consumer record per record.

aiokafka's consumer wraps every record it decodes into a `ConsumerRecord` (eleven fields,
built in Python, plus a generator step and a headers tuple): about half of the audit's
CPU per record. The audit reads each record once and keeps only a digest of it, so it
fetches raw batches and decodes them with aiokafka's own record code (`MemoryRecords`,
compiled where aiokafka's extensions are), which yields records with the key, value,
headers, timestamp and offset the consumer would have given, grouped by batch.

What the consumer does per batch is done here the same way: the batch CRC is checked
(`check.crcs`), control batches are skipped (their markers are no records), records
before the fetch position (inside a batch that started earlier) are skipped, and the next
position is the last batch's `next_offset`, past a compacted tail or a marker. Compressed
batches are decompressed by aiokafka as the consumer would, so a codec whose library is
missing fails here exactly as it fails the consumer. Under read_committed the batches of
aborted transactions are left out, told from the fetch answer's aborted transactions as
the consumer tells them (a producer's transaction is aborted from its first offset until
its ABORT marker).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import CorruptRecordException
from aiokafka.record.control_record import ABORT_MARKER, ControlRecord
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import ConsumerRecord

from mirrorline.core.batches import Batch

__all__ = ["DecodedFetch", "decode", "decode_batch"]


@dataclass(frozen=True, slots=True)
class DecodedFetch:
    """One partition's part of a fetch, decoded."""

    #: Per data batch, its records at or past the fetch position, in offset order; each
    #: has `offset`, `timestamp`, `key`, `value` and `headers` (a list of (str, bytes)).
    batches: list[list[Any]]
    #: Where the next fetch of the partition starts.
    next_offset: int


def decode(records: bytes, position: int, *, where: str,
           aborted: Iterable[tuple[int, int]] | None = None) -> DecodedFetch:
    """The records of `records` (a partition's fetched bytes, fetched from `position`);
    a last batch the fetch's size limit cut off is left for the next fetch. `aborted`
    (read_committed only): the answer's aborted transactions, (producer id, first offset).
    """
    memory = MemoryRecords(records)
    batches: list[list[Any]] = []
    next_offset = position
    pending = sorted(aborted or (), key=lambda entry: entry[1], reverse=True)
    open_aborted: set[int] = set()
    while True:
        batch: Any = memory.next_batch()
        if batch is None:
            break
        if not batch.validate_crc():
            raise CorruptRecordException(
                f"{where}: the record batch at offset {batch.base_offset} does not match "
                "its CRC")
        skip = bool(batch.is_control_batch)
        if aborted is not None and batch.producer_id is not None:
            while pending and pending[-1][1] <= batch.base_offset:
                open_aborted.add(pending.pop()[0])
            if batch.is_control_batch:
                marker = next(iter(batch), None)
                if marker is not None and ControlRecord.parse(marker.key) == ABORT_MARKER:
                    open_aborted.discard(batch.producer_id)
            elif batch.is_transactional and batch.producer_id in open_aborted:
                skip = True
        if not skip:
            found = list(batch)
            if found and found[0].offset < position:
                found = [record for record in found if record.offset >= position]
            if found:
                batches.append(found)
        next_offset = max(next_offset, int(batch.next_offset))
    return DecodedFetch(batches, next_offset)


def decode_batch(batch: Batch, position: int, topic: str, partition: int
                 ) -> list[ConsumerRecord[bytes, bytes]]:
    """The records of one fetched batch at or past `position`, as the consumer returns
    them: for the replicator's record path when it reads raw batches (a batch re-batched,
    or one the target refused as it is). Checks the CRC as the consumer does."""
    where = f"{topic}-{partition}"
    out: list[ConsumerRecord[bytes, bytes]] = []
    for found in decode(bytes(batch.data), position, where=where).batches:
        for r in found:
            key, value = r.key, r.value
            out.append(ConsumerRecord(
                topic, partition, r.offset, r.timestamp, r.timestamp_type, key, value,
                r.checksum, len(key) if key is not None else -1,
                len(value) if value is not None else -1, tuple(r.headers)))
    return out
