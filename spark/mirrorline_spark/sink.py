"""Writing for the executor's query: each micro-batch's acknowledgements, and the record
path's writes.

The query hands every micro-batch to `micro_batch_commit` (Spark's `foreachBatch`, run
in the driver's Python process, which is the executor service's). On the batch path, the
default, the read tasks already copied their ranges (`mirrorline_spark.copytask`, the
source's record batches forwarded as they are) and their rows are acknowledgements,
collected as they are. On the record path (`mirrorline.batch.path = off`) the tasks
that read the chunk rows write them (`write_rows`): every record goes to the target
cluster of its feed (`mirrorline_spark.options`), to the same partition number of its
remote topic with its key, value (null stays null), headers (order and duplicates kept)
and timestamp, with acks=all and idempotence, so a partition's records land in their
source order, and each task answers, per source partition, where each acknowledged
record landed. Either way the executor then records progress, offset syncs and the
offset map (`mirrorline_spark.acks`). Nothing is recorded for a micro-batch that
failed, so a restart copies it again from the last recorded progress: duplicates,
never loss.

A record the target refuses (too large, corrupt) stops its partition only: the records
before it are acknowledged and recorded, the error names topic, partition and offset.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mirrorline.core.acked_runs import offset_runs
from mirrorline.core.rejects import rejected_record
from mirrorline_spark.acks import PartitionAcks
from mirrorline_spark.options import SinkOptions
from mirrorline_spark.records import CHUNK_ARROW_SCHEMA, Chunk, chunk_of_row, from_chunks

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


class _Tracker:
    """Produced records and delivery reports of one (remote topic, partition).

    librdkafka reports deliveries of a partition in produce order, so the i-th report is
    the i-th record produced: the callback only appends the landing offset, and the
    source offsets are kept per produced chunk rather than matched record by record.
    Everything after the first failed record is not acknowledged, whatever its report.
    """

    __slots__ = ("copy_path", "copy_path_reason", "delivered", "downstream", "error",
                 "failures", "fetched_ms", "flow", "partition", "remote", "sizes",
                 "source_topic", "stamps", "upstream")

    def __init__(self, source_topic: str, remote: str, partition: int, flow: str) -> None:
        self.source_topic = source_topic
        self.flow = flow
        self.copy_path = self.copy_path_reason = ""
        #: When this task first saw the partition's records (the record-age reference).
        self.fetched_ms = time.time() * 1000.0
        self.remote = remote
        self.partition = partition
        self.upstream: list[int] = []  # source offsets, in produce order
        self.downstream: list[int] = []  # landing offsets, in report order
        #: Timestamps and value sizes of the produced records, per produced chunk.
        self.stamps: list[pa.Array] = []
        self.sizes: list[pa.Array] = []
        self.failures = 0
        #: (at most this many records are acknowledged, why the partition stopped)
        self.error: tuple[int, str] | None = None
        append = self.downstream.append

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                append(msg.offset())
            else:
                self._failed(err)

        self.delivered = delivered

    def _failed(self, err: Any) -> None:
        index = len(self.downstream) + self.failures
        self.failures += 1
        self.reject(len(self.downstream), self.upstream[index], _refusal(err))

    def reject(self, acked: int, offset: int, what: str) -> None:
        """Stop at source `offset`: at most `acked` records before it count."""
        if self.error is None:
            self.error = (acked, rejected_record(what, self.flow, self.source_topic,
                                                 self.partition, offset, self.remote))

    @property
    def missing(self) -> int:
        return len(self.upstream) - len(self.downstream) - self.failures

    def acks(self) -> PartitionAcks:
        acked = len(self.downstream) if self.error is None \
            else min(len(self.downstream), self.error[0])
        acks = PartitionAcks(self.source_topic, self.partition, self.remote,
                             offset_runs(self.upstream[:acked], self.downstream[:acked]),
                             None if self.error is None else self.error[1], flow=self.flow,
                             copy_path=self.copy_path,
                             copy_path_reason=self.copy_path_reason)
        if acked:  # summary of the acknowledged prefix, for metrics
            stamps = pa.chunked_array(self.stamps, pa.int64()).slice(0, acked)
            low_high = pc.min_max(stamps)
            acks.min_timestamp = int(low_high["min"].as_py())
            acks.max_timestamp = int(low_high["max"].as_py())
            acks.last_timestamp = int(stamps[acked - 1].as_py())
            sizes = pa.chunked_array(self.sizes, pa.int64()).slice(0, acked)
            acks.value_bytes = int(pc.sum(sizes).as_py() or 0)
            acks.fetched_ms = self.fetched_ms
        return acks


#: Takes a micro-batch's id and acknowledgements; raises to fail the micro-batch.
HandOver = Callable[[int, list[PartitionAcks]], None]


def micro_batch_commit(options: Mapping[str, str], hand_over: HandOver
                       ) -> Callable[[Any, int], None]:
    """The query's `foreachBatch` function: the micro-batch's acknowledgements, once every
    task succeeded, to `hand_over`.

    Why not a sink of Spark's Python data source API: its writer is a second Python
    worker beside each read task, only to pass the acknowledgement rows on, and its
    commit runs in a Python process Spark starts for every micro-batch, away from the
    bookkeeping (docs/spark.md, "Measured"). Here the rows are collected in the
    service's own process; only a feed on the record path makes the tasks write
    (`write_rows`, in the tasks that read). An error raised here fails the
    micro-batch and the query, and nothing of it is recorded."""
    writes = any(f.batch_path == "off" for f in SinkOptions.parse(options).feeds)
    plain = dict(options)

    def commit(frame: Any, batch_id: int) -> None:
        if writes:  # Spark rows, not Arrow: Arrow-based Python functions need pandas
            hand_over(batch_id, [
                PartitionAcks.from_json(json.loads(answer)) for answer in
                frame.rdd.mapPartitions(partial(write_rows, plain)).collect()])
        else:
            hand_over(batch_id, [one for batch in frame.toArrow().to_batches()
                                 for _, one, _, _ in from_chunks(batch)
                                 if isinstance(one, PartitionAcks)])

    return commit


def write_rows(options: Mapping[str, str], rows: Iterator[Sequence[Any]]) -> Iterator[str]:
    """A task's chunk rows written (`write_batches`), answered with what was acknowledged
    where, per partition (`PartitionAcks` as JSON)."""
    chunks = (chunk_of_row(row) for row in rows)
    for acks in write_batches(SinkOptions.parse(options), chunks):
        yield json.dumps(asdict(acks), separators=(",", ":"))


def write_batches(options: SinkOptions, batches: Iterator[pa.RecordBatch]
                  ) -> list[PartitionAcks]:
    """Write every chunk (or record batch) of a task; what was acknowledged where, per
    partition. Records go through librdkafka, record by record; acknowledgement rows (the
    read task copied on the batch path) are passed on."""
    from confluent_kafka import Producer

    trackers: dict[tuple[int, str, int], _Tracker] = {}
    #: One producer per feed (target cluster) this task writes to; usually just one.
    producers: dict[int, Any] = {}
    copied: list[PartitionAcks] = []
    try:
        for feed, batch, path, reason in _records(batches):
            if isinstance(batch, PartitionAcks):  # the read task copied (the batch path)
                copied.append(batch)
                continue
            producer = producers.get(feed)
            if producer is None:
                target = options.feeds[feed]
                producer = producers[feed] = Producer(
                    {**PRODUCER_DEFAULTS, **target.kafka, **PRODUCER_FIXED})
            for run in _partition_runs(batch):
                _produce(producer, feed, run, options, trackers, path, reason)
            producer.poll(0)
        for feed, producer in producers.items():
            _flush(producer, [t for k, t in trackers.items() if k[0] == feed])
        return [t.acks() for _, t in sorted(trackers.items())] + copied
    finally:
        for producer in producers.values():
            producer.flush(0)


def _partition_runs(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """`batch` cut where (topic, partition) changes; usually it is one run already."""
    n = batch.num_rows
    if not n:
        return
    topics, partitions = batch.column(0), batch.column(1)
    if (pc.count_distinct(partitions).as_py() == 1
            and pc.count_distinct(topics).as_py() == 1):
        yield batch
        return
    keys = list(zip(topics.to_pylist(), partitions.to_pylist(), strict=True))
    start = 0
    for i in range(1, n + 1):
        if i == n or keys[i] != keys[start]:
            yield batch.slice(start, i - start)
            start = i


def _produce(producer: Any, feed: int, batch: pa.RecordBatch, options: SinkOptions,
             trackers: dict[tuple[int, str, int], _Tracker], path: str, reason: str
             ) -> None:
    """Hand the records of one (topic, partition) run to librdkafka, in order."""
    topic, partition = batch.column(0)[0].as_py(), int(batch.column(1)[0].as_py())
    target = options.feeds[feed]
    remote = target.topics.get(topic)
    if remote is None:
        raise ValueError(f"no remote topic given for source topic {topic!r} "
                         f"(flow {target.flow or feed})")
    tracker = trackers.get((feed, remote, partition))
    if tracker is None:
        tracker = trackers[(feed, remote, partition)] = _Tracker(topic, remote, partition,
                                                                 target.flow)
    tracker.copy_path, tracker.copy_path_reason = path, reason
    if tracker.error is not None:
        return  # this partition stopped at a rejected record
    from confluent_kafka import KafkaException

    offsets = batch.column(2).to_pylist()
    base = len(tracker.upstream)
    tracker.upstream.extend(offsets)
    tracker.stamps.append(batch.column(5))
    tracker.sizes.append(pc.fill_null(pc.binary_length(batch.column(4)), 0).cast(pa.int64()))
    keys, values = batch.column(3).to_pylist(), batch.column(4).to_pylist()
    stamps = batch.column(5).to_pylist()
    produce, poll, delivered = producer.produce, producer.poll, tracker.delivered
    header_column = batch.column(6)
    if not pc.sum(pc.list_value_length(header_column)).as_py():
        for i, (key, value, stamp) in enumerate(zip(keys, values, stamps, strict=True)):
            while True:
                try:
                    produce(remote, value, key, partition, delivered, timestamp=stamp)
                    break
                except BufferError:
                    poll(0.05)
                except KafkaException as exc:  # refused before sending (e.g. too large)
                    _refused(tracker, base + i, exc)
                    return
        return
    # Headers are rare: convert only the rows that have some.
    counts = pc.list_value_length(header_column).to_pylist()
    for i, (key, value, stamp) in enumerate(zip(keys, values, stamps, strict=True)):
        hdrs = ([(h["key"], h["value"]) for h in header_column[i].as_py()] if counts[i]
                else None)
        while True:
            try:
                if hdrs is None:
                    produce(remote, value, key, partition, delivered, timestamp=stamp)
                else:
                    produce(remote, value, key, partition, delivered, timestamp=stamp,
                            headers=hdrs)
                break
            except BufferError:
                poll(0.05)
            except KafkaException as exc:  # refused before sending (e.g. too large)
                _refused(tracker, base + i, exc)
                return


def _refused(tracker: _Tracker, index: int, exc: Exception) -> None:
    """librdkafka refused the record at `index` before sending: what came before may
    still be acknowledged; it and everything after it are not produced."""
    offset = tracker.upstream[index]
    del tracker.upstream[index:]
    tracker.reject(index, offset, _refusal(exc.args[0]))


def _refusal(err: Any) -> str:
    """The replicator's words for a record the target will never take, or could not."""
    what = "target rejected the record" if err.name() in REJECTED \
        else "could not deliver the record"
    return f"{what}: {err.name()} {err.str()}"


def _flush(producer: Any, trackers: list[_Tracker]) -> None:
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
    pending = sum(t.missing for t in trackers)
    if pending:
        raise RuntimeError(f"{pending} delivery reports missing after flush")


def _records(batches: Iterator[pa.RecordBatch]) -> Iterator[Chunk]:
    """(feed, record batch or raw source batches, copy path, reason), whichever layout the
    query uses (chunk rows are unpacked; the per-record layout has one feed)."""
    for batch in batches:
        if batch.schema.names == CHUNK_ARROW_SCHEMA.names:
            yield from from_chunks(batch)
        else:
            yield 0, batch, "", ""
