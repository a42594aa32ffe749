"""The rows the source produces and the sink consumes: one Kafka record each, exactly.

Timestamps stay integers (milliseconds since the epoch, as on the wire) rather than
Spark timestamps, which are microseconds and would invite rounding; null keys and values
stay null; headers keep their order and duplicates as a list of (key, value) structs.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_DDL = ("topic string, partition int, offset long, key binary, value binary, "
              "timestamp long, headers array<struct<key:string,value:binary>>")

HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])

#: The executor's layout: one Spark row per chunk of records, the records inside as an
#: Arrow IPC stream (ARROW_SCHEMA). Spark then moves a few large values per micro-batch
#: instead of converting every record to a JVM row and back, which is what bounds the
#: per-record layout's throughput. `feed` says which of the query's feeds (source and
#: target clusters) the records belong to.
CHUNK_SCHEMA_DDL = ("feed int, topic string, partition int, first_offset long, records long, "
                    "batch binary")

CHUNK_ARROW_SCHEMA = pa.schema([
    pa.field("feed", pa.int32()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("first_offset", pa.int64()),
    pa.field("records", pa.int64()),
    pa.field("batch", pa.binary()),
])

ARROW_SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("timestamp", pa.int64()),
    pa.field("headers", pa.list_(HEADER)),
])


def to_chunk(batch: pa.RecordBatch, feed: int, topic: str, partition: int) -> pa.RecordBatch:
    """One chunk row holding `batch` (records of one partition) as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    first = batch.column(2)[0].as_py() if batch.num_rows else -1
    return pa.RecordBatch.from_arrays([
        pa.array([feed], pa.int32()), pa.array([topic], pa.string()),
        pa.array([partition], pa.int32()),
        pa.array([first], pa.int64()), pa.array([batch.num_rows], pa.int64()),
        pa.array([sink.getvalue().to_pybytes()], pa.binary())], schema=CHUNK_ARROW_SCHEMA)


def from_chunks(chunks: pa.RecordBatch) -> list[tuple[int, pa.RecordBatch]]:
    """The record batches inside a batch of chunk rows, in order, with their feeds."""
    out: list[tuple[int, pa.RecordBatch]] = []
    feeds = chunks.column(0).to_pylist()
    for feed, buffer in zip(feeds, chunks.column(5).to_pylist(), strict=True):
        with pa.ipc.open_stream(pa.py_buffer(buffer)) as reader:
            out.extend((int(feed), b) for b in reader)
    return out
