"""What a contender's target batches are: their codec, and whether they are the source's.

After a run the first few batches of every partition are fetched raw from both clusters
(`mirrorline.kafka.rawbatches.RawBatches`, cut with `mirrorline.core.batches.split`, no
record decoded) and compared:

- **codec**: the compression of the target's batches. Every contender is set up to write
  the source's codec, so another one means the comparison is not what it says.
- **verbatim**: how many target batches hold, after their header, exactly the bytes of a
  source batch's records (same record count too). The batch path copies the records section
  as it is and rewrites only the header, so on the batch path all of them are; a contender
  that decodes and re-batches records (the record path, the raw loop, kcat, MM2) writes
  batches of its own, whose bytes differ (other boundaries, other timestamp deltas, another
  compressor's output).

`compare` is the pure part.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaClient, TopicPartition

from mirrorline.core.batches import HEADER_SIZE, Batch, split
from mirrorline.kafka.rawbatches import RawBatches

#: Target batches compared per partition.
PER_PARTITION = 4


@dataclass(frozen=True)
class BatchCheck:
    source_codecs: tuple[str, ...]
    target_codecs: tuple[str, ...]
    compared: int  # target batches looked at
    verbatim: int  # of which the records section is byte for byte a source batch's
    source_bytes: int  # bytes the source batches looked at take on the source
    source_records: int  # records in them

    @property
    def codec_kept(self) -> bool:
        return self.target_codecs == self.source_codecs

    @property
    def all_verbatim(self) -> bool:
        return self.compared > 0 and self.verbatim == self.compared

    def describe(self) -> str:
        kept = ("kept" if self.codec_kept else
                f"{'/'.join(self.source_codecs)} -> {'/'.join(self.target_codecs)}")
        return f"codec {kept}, {self.verbatim}/{self.compared} batches verbatim"


def _data(batches: Sequence[Batch]) -> list[Batch]:
    return [b for b in batches if b.header is not None and not b.header.is_control]


def _key(batch: Batch) -> tuple[int, bytes]:
    assert batch.header is not None
    return batch.header.record_count, hashlib.blake2b(batch.data[HEADER_SIZE:]).digest()


def compare(source: Sequence[Batch], target: Sequence[Batch]) -> BatchCheck:
    """Compare a partition's (or several's) target batches with the source batches they
    came from. Control batches and legacy message sets are not compared."""
    source, target = _data(source), _data(target)
    originals = {_key(b) for b in source}
    return BatchCheck(
        source_codecs=tuple(sorted({b.header.codec for b in source if b.header})),
        target_codecs=tuple(sorted({b.header.codec for b in target if b.header})),
        compared=len(target),
        verbatim=sum(_key(b) in originals for b in target),
        source_bytes=sum(len(b.data) for b in source),
        source_records=sum(b.header.record_count for b in source if b.header),
    )


async def _leading(raw: RawBatches, tp: TopicPartition, *, count: int | None = None,
                   until: int | None = None) -> list[Batch]:
    """The partition's first `count` data batches, or its batches up to offset `until`."""
    found: list[Batch] = []
    position = 0
    for _ in range(64):
        fetched = (await raw.fetch({tp: position}, max_wait_ms=10))[tp]
        fetched.check(tp)
        cut = split(fetched.records)
        found.extend(cut.batches)
        if cut.next_offset is None or cut.next_offset >= fetched.high_watermark:
            break
        position = cut.next_offset
        if count is not None and len(_data(found)) >= count:
            break
        if until is not None and position >= until:
            break
    return _data(found)[:count] if count is not None else found


async def check(source_bootstrap: str, target_bootstrap: str, source_topic: str,
                target_topic: str, partitions: int) -> BatchCheck:
    """The first `PER_PARTITION` batches of each target partition against the source's."""
    clients = [AIOKafkaClient(bootstrap_servers=b) for b in (source_bootstrap, target_bootstrap)]
    for client in clients:
        await client.bootstrap()
    try:
        source_raw, target_raw = (RawBatches(c) for c in clients)
        sources: list[Batch] = []
        targets: list[Batch] = []
        for p in range(partitions):
            mine = await _leading(target_raw, TopicPartition(target_topic, p),
                                  count=PER_PARTITION)
            ends = [b.header.next_offset for b in mine if b.header is not None]
            # The source batches the target's came from: offsets are kept (identity
            # policy, fresh topics), but the source's batches may be larger or smaller.
            sources.extend(await _leading(source_raw, TopicPartition(source_topic, p),
                                          until=max(ends, default=1)))
            targets.extend(mine)
        return compare(sources, targets)
    finally:
        for client in clients:
            await client.close()
