"""A Kafka sink for Spark Structured Streaming (Arrow batches in, librdkafka out).

Every record goes to the same partition number of its remote topic with its key, value
(null stays null), headers (order and duplicates kept) and timestamp, with acks=all and
idempotence, so a partition's records land in their source order. A writer task
returns, per source partition, where each acknowledged record landed; the commit on the
driver hands that to the executor (`mirrorline_spark.acks`), which records progress,
offset syncs and the offset map. Nothing is recorded for a micro-batch that failed, so
a restart copies it again from the last recorded progress: duplicates, never loss.

A record the target refuses (too large, corrupt) stops its partition only: the records
before it are acknowledged and recorded, the error names topic, partition and offset.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from mirrorline.core.acked_runs import offset_runs
from mirrorline.core.rejects import rejected_record
from mirrorline_spark.acks import PartitionAcks, send_acks
from mirrorline_spark.options import SinkOptions
from mirrorline_spark.records import CHUNK_ARROW_SCHEMA, from_chunks

#: librdkafka settings of the data producer (the operator's connection settings win for
#: everything else; these make the guarantees and are not overridable).
PRODUCER_FIXED = {"acks": "all", "enable.idempotence": True}
PRODUCER_DEFAULTS = {"linger.ms": 5, "batch.size": 1_000_000,
                     "queue.buffering.max.messages": 1_000_000,
                     "queue.buffering.max.kbytes": 1_048_576, "compression.type": "none"}
#: Give up on a flush that makes no progress for this long.
FLUSH_STALL_S = 120.0
#: Errors that mean "the target will never accept this record as it is".
REJECTED = {"MSG_SIZE_TOO_LARGE", "INVALID_RECORD", "CORRUPT_MESSAGE", "INVALID_MSG",
            "RECORD_LIST_TOO_LARGE", "INVALID_MSG_SIZE"}


@dataclass
class AckMessage(WriterCommitMessage):
    acks: list[PartitionAcks] = field(default_factory=list)


class _Tracker:
    """Delivery reports of one (remote topic, partition), in produce order."""

    __slots__ = ("downstream", "error", "fetched_ms", "pending", "rejected_at",
                 "source_topic", "timestamps", "upstream", "value_bytes")

    def __init__(self, source_topic: str) -> None:
        self.source_topic = source_topic
        self.pending: deque[int] = deque()  # source offsets produced, not yet reported
        self.upstream: list[int] = []
        self.downstream: list[int] = []
        #: Timestamp and value size of every record handed over, in produce order.
        self.timestamps: list[int] = []
        self.value_bytes: list[int] = []
        self.error: str | None = None
        #: Source offset of the record the target refused: nothing from it on is recorded
        #: (records before it may still be acknowledged after the refusal).
        self.rejected_at: int | None = None
        #: When this task first saw the partition's records (the record-age reference).
        self.fetched_ms = time.time() * 1000.0

    def reject(self, offset: int, what: str, flow: str, partition: int, remote: str) -> None:
        if self.error is None:
            self.rejected_at = offset
            self.error = rejected_record(what, flow, self.source_topic, partition, offset,
                                         remote)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = SinkOptions.parse(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AckMessage:
        return AckMessage(write_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        acks = [a for m in messages if isinstance(m, AckMessage) for a in m.acks]
        if self.options.ack_socket:
            send_acks(self.options.ack_socket, batchId, acks)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing recorded: the micro-batch is copied again from recorded progress."""


def write_batches(options: SinkOptions, batches: Iterator[pa.RecordBatch]
                  ) -> list[PartitionAcks]:
    from confluent_kafka import KafkaException, Producer

    trackers: dict[tuple[str, int], _Tracker] = {}

    def delivered(err: Any, msg: Any) -> None:
        tracker = trackers[(msg.topic(), msg.partition())]
        offset = tracker.pending.popleft()
        if err is None:
            if tracker.rejected_at is None or offset < tracker.rejected_at:
                tracker.upstream.append(offset)
                tracker.downstream.append(msg.offset())
        else:
            tracker.reject(offset, _refusal(err), options.flow, msg.partition(), msg.topic())

    producer = Producer({**PRODUCER_DEFAULTS, **options.kafka, **PRODUCER_FIXED})
    produce, poll = producer.produce, producer.poll
    try:
        for batch in _records(batches):
            if not batch.num_rows:
                continue
            _account(batch, options, trackers)
            topics, partitions = batch.column(0).to_pylist(), batch.column(1).to_pylist()
            offsets, keys = batch.column(2).to_pylist(), batch.column(3).to_pylist()
            values, stamps = batch.column(4).to_pylist(), batch.column(5).to_pylist()
            # Headers are rare: convert only the rows that have some.
            header_counts = pc.list_value_length(batch.column(6)).to_pylist()
            header_column = batch.column(6)
            tracker: _Tracker | None = None
            last: tuple[str, int] | None = None
            remote = ""
            for i in range(batch.num_rows):
                if (topics[i], partitions[i]) != last:
                    last = (topics[i], partitions[i])
                    remote = options.topics[topics[i]]
                    tracker = trackers[(remote, partitions[i])]
                assert tracker is not None
                if tracker.error is not None:
                    continue  # this partition stopped at a rejected record
                tracker.pending.append(offsets[i])
                hdrs = None
                if header_counts[i]:
                    hdrs = [(h["key"], h["value"]) for h in header_column[i].as_py()]
                while True:
                    try:
                        if hdrs is None:
                            produce(remote, values[i], keys[i], partitions[i], delivered,
                                    timestamp=stamps[i])
                        else:
                            produce(remote, values[i], keys[i], partitions[i], delivered,
                                    timestamp=stamps[i], headers=hdrs)
                        break
                    except BufferError:
                        poll(0.05)
                    except KafkaException as exc:  # refused before sending (e.g. too large)
                        tracker.pending.pop()
                        tracker.reject(offsets[i], _refusal(exc.args[0]), options.flow,
                                       partitions[i], remote)
                        break
            poll(0)
        _flush(producer, trackers)
    finally:
        producer.flush(0)
    out = []
    for (remote, partition), t in sorted(trackers.items()):
        acks = PartitionAcks(t.source_topic, partition, remote,
                             offset_runs(t.upstream, t.downstream), t.error)
        acked = len(t.upstream)
        if acked:  # summary of the acknowledged prefix, for metrics
            stamps = t.timestamps[:acked]
            acks.value_bytes = sum(t.value_bytes[:acked])
            acks.min_timestamp, acks.max_timestamp = min(stamps), max(stamps)
            acks.last_timestamp = stamps[-1]
            acks.fetched_ms = t.fetched_ms
        out.append(acks)
    return out


def _refusal(err: Any) -> str:
    """The replicator's words for a record the target will never take, or could not."""
    what = "target rejected the record" if err.name() in REJECTED \
        else "could not deliver the record"
    return f"{what}: {err.name()} {err.str()}"


def _account(batch: pa.RecordBatch, options: SinkOptions,
             trackers: dict[tuple[str, int], _Tracker]) -> None:
    """Register the batch's partitions and keep timestamps and value sizes (vectorised)."""
    for topic, partition in set(zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(),
                                    strict=True)):
        remote = options.topics.get(topic)
        if remote is None:
            raise ValueError(f"no remote topic given for source topic {topic!r}")
        if (remote, partition) not in trackers:
            trackers[(remote, partition)] = _Tracker(topic)
    sizes = pc.fill_null(pc.binary_length(batch.column(4)), 0).to_pylist()
    stamps = batch.column(5).to_pylist()
    rows = zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), stamps, sizes,
               strict=True)
    for topic, partition, stamp, size in rows:
        t = trackers[(options.topics[topic], partition)]
        t.timestamps.append(stamp)
        t.value_bytes.append(size)


def _flush(producer: Any, trackers: Mapping[tuple[str, int], _Tracker]) -> None:
    """Wait for every delivery report; fail (nothing recorded) if none come for long."""
    last, left = time.monotonic(), len(producer)
    while left:
        producer.flush(1.0)
        now_left = len(producer)
        if now_left < left:
            last, left = time.monotonic(), now_left
        elif time.monotonic() - last > FLUSH_STALL_S:
            raise RuntimeError(f"{now_left} records not acknowledged by the target within "
                               f"{FLUSH_STALL_S:.0f}s")
    pending = sum(len(t.pending) for t in trackers.values())
    if pending:
        raise RuntimeError(f"{pending} delivery reports missing after flush")


def _records(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Record batches, whichever layout the query uses (chunk rows are unpacked)."""
    for batch in batches:
        if batch.schema.names == CHUNK_ARROW_SCHEMA.names:
            yield from from_chunks(batch)
        else:
            yield batch
