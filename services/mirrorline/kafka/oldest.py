"""The timestamps of the oldest records not copied yet, read from the source.

One group-less consumer per owner, fetching only while it reads: each call seeks every
asked partition to its offset and takes the first record a fetch brings back (a small
fetch: `max_partition_fetch_bytes` keeps it to about one record batch per partition, and
all partitions led by one broker share one request). Between calls every partition is
paused, so the consumer fetches nothing in the background.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
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

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def timestamps(self, offsets: Mapping[TopicPartition, int], *,
                         wait_s: float = 1.0) -> Oldest:
        """Timestamp of the first record at or after each partition's offset; partitions
        that brought nothing within `wait_s` (leader away, an offset no longer there) are
        left out. The high watermarks of the fetch responses come along."""
        out = Oldest({}, {})
        if not offsets:
            return out
        consumer = self._consumer
        if consumer is None:
            consumer = AIOKafkaConsumer(**self._kwargs)
            await consumer.start()
            self._consumer = consumer
        consumer.assign(list(offsets))
        try:
            for tp, offset in offsets.items():
                consumer.seek(tp, offset)
            deadline = time.monotonic() + wait_s
            while len(out.timestamps) < len(offsets) and time.monotonic() < deadline:
                left = [tp for tp in offsets if tp not in out.timestamps]
                batches = await consumer.getmany(*left, timeout_ms=max(
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
