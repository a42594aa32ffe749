"""A Kafka source for Spark Structured Streaming on the Python Data Source API.

Explicitly assigned source partitions (never a consumer group), read from given start
offsets, from one or several source clusters (the query's *feeds*, see
`mirrorline_spark.options`). A micro-batch's offsets are the partitions' source offsets:
`{"<feed>:<partition>:<topic>": next offset}`. Ends come from the high watermarks in
fetch responses (`mirrorline_spark.probe`). Each micro-batch reads one Spark partition
per Kafka partition and yields Arrow record batches of records read with librdkafka; in
the executor's `chunks` layout wherever the batch path applies, a Spark partition is
instead a group of a feed's ranges (`group_ranges`, at most option `readTasks` per feed)
whose read task copies them itself and yields their acknowledgements
(`mirrorline_spark.copytask`).

The start offsets are given by whoever starts the query (the executor reads them from
durable progress); Spark's checkpoint is only a cache of them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from mirrorline_spark import FORMAT
from mirrorline_spark.options import (
    Range,
    SourceKey,
    SourceOptions,
    offset_key,
    parse_layout,
    parse_offset_key,
)
from mirrorline_spark.probe import EndProbe
from mirrorline_spark.records import (
    ARROW_SCHEMA,
    CHUNK_SCHEMA_DDL,
    HEADER,
    SCHEMA_DDL,
    to_chunk,
)

#: Records per consume() call and per Arrow batch.
CHUNK = 20_000
#: A read task that gets nothing for this long while records are due fails, naming them.
STALL_S = 120.0
#: Why a partition of a flow with `mirrorline.batch.path = off` takes the record path,
#: in the words of the replicator's status.
RECORD_PATH_REASON = "mirrorline.batch.path = off"


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    feed: int
    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class KafkaRanges(InputPartition):
    """Ranges of one feed that one read task copies together (the batch path)."""

    feed: int
    ranges: tuple[Range, ...]


def group_ranges(ranges: Sequence[KafkaRange], tasks: int) -> list[KafkaRanges]:
    """`ranges` (all of one feed) in at most `tasks` groups of about as many records each:
    the largest range first, each into the group holding fewest records so far. Within a
    group the ranges keep their (topic, partition) order."""
    groups: list[list[KafkaRange]] = [[] for _ in range(min(tasks, len(ranges)))]
    sizes = [0] * len(groups)
    for r in sorted(ranges, key=lambda r: (-(r.end - r.start), r.topic, r.partition)):
        least = sizes.index(min(sizes))
        groups[least].append(r)
        sizes[least] += r.end - r.start
    return [KafkaRanges(group[0].feed, tuple(
                (r.topic, r.partition, r.start, r.end)
                for r in sorted(group, key=lambda r: (r.topic, r.partition))))
            for group in groups if group]


class KafkaDataSource(DataSource):
    """`format("mirrorline-kafka")`: the source (readStream)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return CHUNK_SCHEMA_DDL if parse_layout(self.options) == "chunks" else SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(SourceOptions.parse(self.options))


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        #: One log-end probe per feed (each feed may be another source cluster).
        self._probes: dict[int, EndProbe] = {}

    def initialOffset(self) -> dict[str, int]:
        return {offset_key(*k): o for k, o in sorted(self.options.starts.items())}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        if self.options.drain_file and os.path.exists(self.options.drain_file):
            return dict(start)  # the executor is handing these partitions over
        positions = {parse_offset_key(k): int(v) for k, v in start.items()}
        high = self.high_watermarks(positions)
        # Micro-batches stay bounded per partition whatever limit the trigger passes.
        cap = self.options.max_records
        end = {}
        for key, position in positions.items():
            hw = high.get(key, position)
            end[offset_key(*key)] = max(position, min(hw, position + cap))
        return end

    def high_watermarks(self, positions: dict[SourceKey, int]) -> dict[SourceKey, int]:
        by_feed: dict[int, dict[tuple[str, int], int]] = {}
        for (feed, topic, partition), position in positions.items():
            by_feed.setdefault(feed, {})[(topic, partition)] = position
        high: dict[SourceKey, int] = {}
        for feed, wanted in sorted(by_feed.items()):
            probe = self._probes.get(feed)
            if probe is None:
                probe = self._probes[feed] = EndProbe(self.options.feeds[feed].kafka)
            high.update({(feed, t, p): o for (t, p), o in probe.ends(wanted).items()})
        return high

    def partitions(self, start: dict[str, int], end: dict[str, int]
                   ) -> Sequence[KafkaRange | KafkaRanges]:
        by_feed: dict[int, list[KafkaRange]] = {}
        for key, stop in sorted(end.items()):
            feed, topic, partition = parse_offset_key(key)
            first = int(start.get(key, stop))
            if first < int(stop):
                by_feed.setdefault(feed, []).append(
                    KafkaRange(feed, topic, partition, first, int(stop)))
        planned: list[KafkaRange | KafkaRanges] = []
        for index, mine in sorted(by_feed.items()):
            if self._copies(index):
                planned.extend(group_ranges(mine, self.options.read_tasks or len(mine)))
            else:
                planned.extend(mine)
        return planned

    def _copies(self, feed: int) -> bool:
        """Whether the feed's read tasks copy what they read (the batch path)."""
        return self.options.layout == "chunks" and self.options.feeds[feed].batch_path != "off"

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, KafkaRanges):
            from mirrorline_spark.copytask import copy_ranges

            return copy_ranges(self.options.feeds[partition.feed], partition.feed,
                               partition.ranges, stall_s=STALL_S)
        assert isinstance(partition, KafkaRange)
        feed = self.options.feeds[partition.feed]
        batches = read_range(feed.kafka, partition)
        if self.options.layout == "chunks":
            return (to_chunk(b, partition.feed, partition.topic, partition.partition,
                             path="records", reason=RECORD_PATH_REASON)
                    for b in batches)
        return batches

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the executor records progress once the target acknowledged."""

    def stop(self) -> None:
        for probe in self._probes.values():
            probe.close()
        self._probes.clear()


def read_range(kafka: dict[str, str], r: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Records [r.start, r.end) of one partition, in offset order, as Arrow batches."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({**kafka, "group.id": "mirrorline-spark-reader",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "auto.offset.reset": "error", "fetch.max.bytes": 52428800,
                         "max.partition.fetch.bytes": 8388608,
                         "queued.max.messages.kbytes": 262144})
    try:
        tp = TopicPartition(r.topic, r.partition, r.start)
        consumer.assign([tp])
        position = r.start
        last_progress = time.monotonic()
        while position < r.end:
            # Never ask for more than the range still holds: consume() waits out its
            # timeout for a count that can only come from records past the end.
            messages = consumer.consume(num_messages=min(CHUNK, r.end - position),
                                        timeout=1.0)
            if not messages:
                pos = consumer.position([TopicPartition(r.topic, r.partition)])[0].offset
                if pos >= r.end:  # only control records (transaction markers) were left
                    break
                if time.monotonic() - last_progress > STALL_S:
                    raise RuntimeError(
                        f"no records from {r.topic!r} partition {r.partition} at offset "
                        f"{position} for {STALL_S:.0f}s although the log reaches {r.end}")
                continue
            last_progress = time.monotonic()
            for m in messages:
                if m.error() is not None:
                    raise KafkaException(m.error())
            last = int(messages[-1].offset() or 0)
            if last >= r.end:
                messages = [m for m in messages if int(m.offset() or 0) < r.end]
            if not messages:
                break
            position = int(messages[-1].offset() or 0) + 1
            yield to_arrow(r.topic, r.partition, messages)
    finally:
        consumer.close()


def to_arrow(topic: str, partition: int, messages: Sequence[Any]) -> pa.RecordBatch:
    from confluent_kafka import Message

    n = len(messages)
    # Unbound C methods mapped over the list: the cheapest way to take the fields apart.
    stamps = [t for _, t in map(Message.timestamp, messages)]
    headers = list(map(Message.headers, messages))
    return pa.RecordBatch.from_arrays([
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array(list(map(Message.offset, messages)), pa.int64()),
        pa.array(list(map(Message.key, messages)), pa.binary()),
        pa.array(list(map(Message.value, messages)), pa.binary()),
        pa.array(stamps, pa.int64()),
        pa.array([h or [] for h in headers] if any(headers) else [[]] * n,
                 pa.list_(HEADER)),
    ], schema=ARROW_SCHEMA)
