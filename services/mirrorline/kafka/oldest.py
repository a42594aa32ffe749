"""The timestamps of the oldest records not copied yet, read from the source.

One group-less consumer per owner, fetching only while it reads: each call seeks every
asked partition to its offset and takes the first record a fetch brings back (a small
fetch: `max_partition_fetch_bytes` keeps it to about one record batch per partition, and
all partitions led by one broker share one request; a broker still sends a whole first
batch, and only its first record is decoded). Between calls every partition is
paused, so the consumer fetches nothing in the background.

An owner that does not fetch its partitions itself (the Spark executor: its reading
happens inside Spark) also learns their log ends through the same consumer
(`high_watermarks`): one tiny fetch per partition from its last known end, whose response
carries the high watermark -- right on every broker, where ListOffsets(latest) is not
(Tansu answers short of the end). Those partitions stay assigned (paused) between calls,
so the two kinds of read share one assignment and never make the consumer re-fetch
metadata.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

__all__ = ["Oldest", "OldestRecords"]


@dataclass(frozen=True)
class Oldest:
    #: Timestamp of the oldest record at or after the asked offset, per partition.
    timestamps: dict[TopicPartition, int]
    #: The high watermark the fetch responses carried (right on every broker, where
    #: ListOffsets(latest) is not: Tansu answers short of the end).
    high_watermarks: dict[TopicPartition, int]


class OldestRecords:
    def __init__(self, consumer_kwargs: Mapping[str, Any]) -> None:
        kwargs = dict(consumer_kwargs, enable_auto_commit=False, fetch_max_wait_ms=100,
                      max_partition_fetch_bytes=1024)
        kwargs.pop("group_id", None)
        self._kwargs = kwargs
        self._consumer: AIOKafkaConsumer | None = None
        #: The partitions whose ends `high_watermarks` follows: kept assigned.
        self._kept: dict[TopicPartition, int] = {}
        #: The newest high watermark `high_watermarks` saw, per kept partition.
        self._high: dict[TopicPartition, int] = {}

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def _started(self) -> AIOKafkaConsumer:
        consumer = self._consumer
        if consumer is None:
            consumer = AIOKafkaConsumer(**self._kwargs)
            await consumer.start()
            self._consumer = consumer
        return consumer

    def _assign(self, consumer: AIOKafkaConsumer, asked: Iterable[TopicPartition]) -> None:
        """Assign the asked and the kept partitions, if that changes the assignment: each
        one placed (a partition without a position would be reset with ListOffsets) and
        paused until a read resumes it."""
        wanted = set(asked) | set(self._kept)
        if wanted == consumer.assignment():
            return
        consumer.assign(list(wanted))
        for tp, position in self._kept.items():
            consumer.seek(tp, max(0, position))
        consumer.pause(*wanted)

    async def timestamps(self, offsets: Mapping[TopicPartition, int], *,
                         wait_s: float = 1.0) -> Oldest:
        """Timestamp of the first record at or after each partition's offset; partitions
        that brought nothing within `wait_s` (leader away, an offset no longer there) are
        left out. The high watermarks of the fetch responses come along."""
        out = Oldest({}, {})
        if not offsets:
            return out
        consumer = await self._started()
        self._assign(consumer, offsets)
        try:
            for tp, offset in offsets.items():
                consumer.seek(tp, offset)
            consumer.resume(*offsets)
            deadline = time.monotonic() + wait_s
            while len(out.timestamps) < len(offsets) and time.monotonic() < deadline:
                left = [tp for tp in offsets if tp not in out.timestamps]
                # One record per call: aiokafka decodes a fetched batch record by record
                # as they are taken, so the rest of a batch of thousands (a partition far
                # behind) is never decoded.
                batches = await consumer.getmany(*left, max_records=1, timeout_ms=max(
                    1, int((deadline - time.monotonic()) * 1000)))
                for tp, records in batches.items():
                    first = next((r for r in records if r.offset >= offsets[tp]), None)
                    if first is not None:
                        out.timestamps[tp] = int(first.timestamp)
            for tp in offsets:
                high = consumer.highwater(tp)
                if high is not None:
                    out.high_watermarks[tp] = int(high)
        finally:
            # Paused, not unassigned: an empty assignment would make aiokafka ask for the
            # metadata of every topic.
            consumer.pause(*offsets)
        return out

    async def high_watermarks(self, positions: Mapping[TopicPartition, int], *,
                              wait_s: float = 0.3) -> dict[TopicPartition, int]:
        """The high watermarks of `positions`' partitions as the newest fetch responses
        report them (those it learnt none for are left out); they stay assigned, paused,
        until the next call names other partitions.

        Each partition is fetched from its last known end (or its position, if further):
        a fetch there answers as soon as anything new arrives, with the new end; one that
        brings nothing is held by the broker for `fetch_max_wait_ms` at most, and the call
        returns after `wait_s` at the latest."""
        self._kept = dict(positions)
        self._high = {tp: high for tp, high in self._high.items() if tp in positions}
        if not positions:
            return {}
        consumer = await self._started()
        self._assign(consumer, positions)
        try:
            for tp, position in positions.items():
                consumer.seek(tp, max(0, position, self._high.get(tp, position)))
            consumer.resume(*positions)
            await consumer.getmany(*positions, timeout_ms=int(wait_s * 1000), max_records=1)
            for tp in positions:
                high = consumer.highwater(tp)
                if high is not None:
                    self._high[tp] = max(int(high), self._high.get(tp, int(high)))
        finally:
            consumer.pause(*positions)
        return dict(self._high)
