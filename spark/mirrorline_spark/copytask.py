"""A read task that copies: the batch path on Spark fetches, rewrites and produces in the
task that reads the ranges, and only the acknowledgements travel as Spark rows.

Why not a row per fetched chunk, written by another worker: every byte would cross from
the read task's Python worker into the JVM and out to the writer's Python worker, two
socket hops and an Arrow frame each way, which cost about as much CPU as the copy itself
(docs/spark.md, "Measured"). Here a range goes source -> task -> target on one event
loop, the next fetch travelling while the last answer's batches are produced, as on a
replicator worker; the task then yields one acknowledgement row per partition
(`records.acks_row`), which the query collects into the executor's process once
the micro-batch's tasks all succeeded (`mirrorline_spark.sink.micro_batch_commit`).

A task copies several ranges of one feed (`source.group_ranges`: a micro-batch has about
as many copying tasks per feed as Spark has cores), one range after another, sharing one
client of each cluster and one idempotent producer. Each task costs the driver's JVM a
task thread's work and its worker a client set-up per cluster whatever its size, so one
task per Kafka partition paid that for every partition of every micro-batch. The ranges
are copied one at a time, not all at once: copied at once, each range's fetch answers
and produce requests in flight add to the worker's working set (up to twice
`max.partition.fetch.bytes` per range), and that cost 1.4 times the CPU per record in a
measurement of four 1 KiB ranges copied in one process (1.8-2.9 CPU s per million records
against 1.4-1.6, five to ten times the page faults); one at a time costs what a task per
range did (1.3-1.4).

What a micro-batch guarantees does not change: nothing is recorded before the commit,
which follows every task's success; a failed task fails the micro-batch, nothing of it is
recorded, and the query copies it again from recorded progress (the target's idempotent
producer is the task's, so a copy made twice is two copies, as on the record path). A
partition whose record the target refuses stops there, the records before it
acknowledged, and reading it stops too; the task's other partitions go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

import pyarrow as pa

from mirrorline.kafka.fetchroute import Routed
from mirrorline.runtime import tune_kafka_io
from mirrorline_spark.batchread import FeedClient, RangeReader, run_down
from mirrorline_spark.batchsink import BatchWriter, Rec
from mirrorline_spark.options import Range, SourceFeed
from mirrorline_spark.records import acks_row

__all__ = ["copy_ranges"]


def copy_ranges(source: SourceFeed, feed: int, ranges: Sequence[Range], *,
                stall_s: float) -> Iterator[pa.RecordBatch]:
    """Copy records [start, end) of each range's source partition to its remote topic;
    yields the acknowledgement rows of what landed where (none for a range of which
    nothing was copied). The ranges are copied in the order given."""
    if source.target is None:
        raise ValueError(f"feed {feed}: the batch path copies in the read task and needs "
                         f"the feed's 'target'")
    tune_kafka_io()  # as the services run: reused buffers, fewer copies
    loop = asyncio.new_event_loop()
    client = FeedClient(source)
    writer = BatchWriter(source.target, loop)
    readers = [RangeReader(source, client, topic, partition, start, end, stall_s=stall_s)
               for topic, partition, start, end in ranges]
    try:
        loop.run_until_complete(_copy_all(readers, writer))
        acks = writer.finish()
    finally:
        run_down(loop, writer.aclose, client.aclose)
    for one in acks:
        yield acks_row(feed, one)


async def _copy_all(readers: Sequence[RangeReader], writer: BatchWriter) -> None:
    for reader in readers:  # one after another: see the module's docstring
        await _copy(reader, writer)


async def _copy(reader: RangeReader, writer: BatchWriter) -> None:
    topic, partition = reader.topic, reader.partition
    routes = reader.routes()
    try:
        async for routed in routes:
            await _send(writer, topic, partition, routed.batches)
            if writer.stopped(topic, partition):
                break  # the target refused a record: this partition stops there
    finally:
        await routes.aclose()


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
