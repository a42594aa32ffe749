"""A read task that copies: the batch path on Spark fetches, rewrites and produces in the
task that reads the range, and only the acknowledgements travel as Spark rows.

Why not a row per fetched chunk, written by another worker: every byte would cross from
the read task's Python worker into the JVM and out to the writer's Python worker, two
socket hops and an Arrow frame each way, which cost about as much CPU as the copy itself
(docs/spark.md, "Measured"). Here a range goes source -> task -> target on one event
loop, the next fetch travelling while the last answer's batches are produced, as on a
replicator worker; the task then yields one acknowledgement row per partition
(`records.acks_row`), which the query collects into the executor's process once
the micro-batch's tasks all succeeded (`mirrorline_spark.sink.micro_batch_commit`).

What a micro-batch guarantees does not change: nothing is recorded before the commit,
which follows every task's success; a failed task fails the micro-batch, nothing of it is
recorded, and the query copies it again from recorded progress (the target's idempotent
producer is the task's, so a copy made twice is two copies, as on the record path). A
partition whose record the target refuses stops there, the records before it
acknowledged, and reading it stops too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

import pyarrow as pa

from mirrorline.kafka.fetchroute import Routed
from mirrorline.runtime import tune_kafka_io
from mirrorline_spark.batchread import RangeReader, run_down
from mirrorline_spark.batchsink import BatchWriter, Rec
from mirrorline_spark.options import SourceFeed
from mirrorline_spark.records import acks_row

__all__ = ["copy_range"]


def copy_range(source: SourceFeed, feed: int, topic: str, partition: int, start: int,
               end: int, *, stall_s: float) -> Iterator[pa.RecordBatch]:
    """Copy records [start, end) of one source partition to its remote topic; yields the
    acknowledgement row of what landed where (none if nothing was copied)."""
    if source.target is None:
        raise ValueError(f"feed {feed}: the batch path copies in the read task and needs "
                         f"the feed's 'target'")
    tune_kafka_io()  # as the services run: reused buffers, fewer copies
    loop = asyncio.new_event_loop()
    reader = RangeReader(source, topic, partition, start, end, loop=loop, stall_s=stall_s)
    writer = BatchWriter(source.target, loop)
    try:
        for routed in reader.routes():
            loop.run_until_complete(_send(writer, topic, partition, routed.batches))
            if writer.stopped(topic, partition):
                break  # the target refused a record: this partition stops there
        acks = writer.finish()
    finally:
        run_down(loop, writer.aclose, reader.aclose)
    for one in acks:
        yield acks_row(feed, one)


async def _send(writer: BatchWriter, topic: str, partition: int,
                routed: Sequence[Routed]) -> None:
    """One fetch answer's batches in order: each forwarded batch as it is, and the records
    of consecutive record-path batches batched together (small source batches become
    fewer, larger ones)."""
    records: list[Rec] = []
    reason = ""
    for one in [*routed, None]:
        if records and (one is None or one.records is None):
            await writer.send_records(topic, partition, records, path="records",
                                      reason=reason)
            records = []
        if one is None:
            break
        reason = one.reason
        if one.records is None:
            await writer.send_batch(topic, partition, one.batch, path="batches",
                                    reason=reason)
        else:
            records.extend((r.offset, r.timestamp, r.key, r.value, list(r.headers))
                           for r in one.records)
