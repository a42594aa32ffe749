"""The rows the source produces and the sink consumes: one Kafka record each, exactly, or
(the executor's `chunks` layout) chunks of records, or what a read task that copied got
acknowledged.

Timestamps stay integers (milliseconds since the epoch, as on the wire) rather than
Spark timestamps, which are microseconds and would invite rounding; null keys and values
stay null; headers keep their order and duplicates as a list of (key, value) structs.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import pyarrow as pa

from mirrorline_spark.acks import PartitionAcks

SCHEMA_DDL = ("topic string, partition int, offset long, key binary, value binary, "
              "timestamp long, headers array<struct<key:string,value:binary>>")

HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])

#: The executor's layout: one Spark row per chunk of records, the records inside as an
#: Arrow IPC stream (ARROW_SCHEMA). Spark then moves a few large values per micro-batch
#: instead of converting every record to a JVM row and back, which is what bounds the
#: per-record layout's throughput. `feed` says which of the query's feeds (source and
#: target clusters) the records belong to; `path` and `reason` say which copy path the
#: source chose for the chunk and why, in the words of the replicator's status
#: (`PartitionStatus.copy_path`, `copy_path_reason`).
#:
#: On the batch path the read task copies itself (`mirrorline_spark.copytask`) and its
#: rows are acknowledgements instead (`path` "acks"): `batch` holds one
#: `PartitionAcks` as JSON, `first_offset` the first source offset acknowledged and
#: `records` how many were.
CHUNK_SCHEMA_DDL = ("feed int, topic string, partition int, first_offset long, records long, "
                    "batch binary, path string, reason string")

CHUNK_ARROW_SCHEMA = pa.schema([
    pa.field("feed", pa.int32()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("first_offset", pa.int64()),
    pa.field("records", pa.int64()),
    pa.field("batch", pa.binary()),
    pa.field("path", pa.string()),
    pa.field("reason", pa.string()),
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


#: `path` of a row of acknowledgements.
ACKS = "acks"


def to_chunk(batch: pa.RecordBatch, feed: int, topic: str, partition: int, *,
             path: str = "records", reason: str = "") -> pa.RecordBatch:
    """One chunk row holding `batch` (records of one partition) as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    first = batch.column(2)[0].as_py() if batch.num_rows else -1
    return _row(feed, topic, partition, first, batch.num_rows, sink.getvalue().to_pybytes(),
                path=path, reason=reason)


def acks_row(feed: int, acks: PartitionAcks) -> pa.RecordBatch:
    """One row carrying what a read task that copies got acknowledged for a partition."""
    first = acks.runs[0][0] if acks.runs else -1
    return _row(feed, acks.topic, acks.partition, first, acks.records,
                json.dumps(asdict(acks), separators=(",", ":")).encode(),
                path=ACKS, reason="")


def _one_binary(data: bytes | bytearray) -> pa.Array:
    """A binary array of the one value `data`, over its bytes (not a copy of them)."""
    offsets = pa.py_buffer(struct.pack("<ii", 0, len(data)))
    return pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.py_buffer(data)])


def chunk_of_row(row: Sequence[Any]) -> pa.RecordBatch:
    """A chunk row as Spark hands it to Python code that takes rows rather than Arrow
    (fields in CHUNK_SCHEMA_DDL's order) back as its Arrow batch."""
    feed, topic, partition, first, records, data, path, reason = row
    return _row(feed, topic, partition, first, records, data, path=path,
                reason=reason or "")


def _row(feed: int, topic: str, partition: int, first: int, records: int,
         data: bytes | bytearray, *,
         path: str, reason: str) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([
        pa.array([feed], pa.int32()), pa.array([topic], pa.string()),
        pa.array([partition], pa.int32()),
        pa.array([first], pa.int64()), pa.array([records], pa.int64()),
        _one_binary(data),
        pa.array([path], pa.string()), pa.array([reason], pa.string())],
        schema=CHUNK_ARROW_SCHEMA)


#: What a chunk row carries: records (Arrow, with the copy path and its reason), or what a
#: read task that copied got acknowledged.
Chunk = tuple[int, "pa.RecordBatch | PartitionAcks", str, str]


def from_chunks(chunks: pa.RecordBatch) -> list[Chunk]:
    """What a batch of chunk rows holds, in order: (feed, records or acknowledgements,
    copy path, reason)."""
    out: list[Chunk] = []
    columns = {name: chunks.column(name).to_pylist()
               for name in ("feed", "path", "reason")}
    for feed, buffer, path, reason in zip(
            columns["feed"], _binary_views(chunks.column("batch")), columns["path"],
            columns["reason"], strict=True):
        if path == ACKS:
            out.append((int(feed), PartitionAcks.from_json(json.loads(bytes(buffer))),
                        path, ""))
            continue
        with pa.ipc.open_stream(pa.py_buffer(buffer)) as reader:
            out.extend((int(feed), b, path or "records", reason or "") for b in reader)
    return out


def _binary_views(column: pa.Array) -> list[memoryview]:
    """The values of a binary column as views of its Arrow buffer (no copy of the bytes:
    a chunk of source batches is megabytes)."""
    _, offset_buffer, data = column.buffers()
    if offset_buffer is None or not len(column):
        return []
    # int32 offsets, little-endian as Arrow's memory layout is.
    offsets = memoryview(offset_buffer).cast("B").cast("i")[
        column.offset:column.offset + len(column) + 1]
    view = memoryview(data) if data is not None else memoryview(b"")
    return [view[offsets[i]:offsets[i + 1]] for i in range(len(column))]


def records_to_arrow(topic: str, partition: int, records: Sequence[Any]) -> pa.RecordBatch:
    """Decoded records (aiokafka's `ConsumerRecord`s: a source batch taking the record
    path) as rows of ARROW_SCHEMA."""
    n = len(records)
    headers = [list(r.headers) for r in records]
    return pa.RecordBatch.from_arrays([
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.array([r.timestamp for r in records], pa.int64()),
        pa.array(headers, pa.list_(HEADER)),
    ], schema=ARROW_SCHEMA)
