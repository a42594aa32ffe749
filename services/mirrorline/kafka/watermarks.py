"""How many records a topic holds, read from fetch responses' high watermarks.

ListOffsets(latest) is the usual way to ask, but not every Kafka-compatible broker
answers it correctly; the high watermark carried by every fetch response is right
everywhere. One short fetch per partition is enough to learn it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from mirrorline.kafka.metadata import partitions_by_topic


async def high_watermarks(consumer_kwargs: Mapping[str, Any], topics: Iterable[str], *,
                          timeout: float = 10.0) -> dict[TopicPartition, int]:
    """High watermark of every partition of `topics` (missing topics are skipped)."""
    kwargs = dict(consumer_kwargs, enable_auto_commit=False, fetch_max_wait_ms=50,
                  max_partition_fetch_bytes=1024)
    kwargs.pop("group_id", None)
    consumer = AIOKafkaConsumer(**kwargs)
    await consumer.start()
    try:
        known = await partitions_by_topic(consumer, topics)
        tps = [TopicPartition(t, p) for t, partitions in known.items() for p in partitions]
        if not tps:
            return {}
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while any(consumer.highwater(tp) is None for tp in tps):
            if time.monotonic() > deadline:
                break
            await consumer.getmany(timeout_ms=100, max_records=1)
        return {tp: hw for tp in tps if (hw := consumer.highwater(tp)) is not None}
    finally:
        await consumer.stop()


def totals(watermarks: Mapping[TopicPartition, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for tp, high in watermarks.items():
        out[tp.topic] = out.get(tp.topic, 0) + high
    return out


class HighWatermarkProbe:
    """Keeps learning the high watermarks of a changing set of partitions from fetch
    responses, for an owner that does not fetch them itself (the Spark executor: its
    reading happens inside Spark). Group-less; one tiny fetch per partition and call."""

    def __init__(self, consumer_kwargs: Mapping[str, Any]) -> None:
        kwargs = dict(consumer_kwargs, enable_auto_commit=False, fetch_max_wait_ms=50,
                      max_partition_fetch_bytes=1024)
        kwargs.pop("group_id", None)
        self._kwargs = kwargs
        self._consumer: AIOKafkaConsumer | None = None
        self._assigned: frozenset[TopicPartition] = frozenset()
        self.high: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(**self._kwargs)
        await consumer.start()
        self._consumer = consumer

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def refresh(self, positions: Mapping[TopicPartition, int],
                      wait_s: float = 0.3) -> dict[TopicPartition, int]:
        """The partitions' high watermarks as the newest fetch responses report them.

        Each partition is fetched from its last known end (or `positions`, if further): a
        fetch there answers as soon as anything new arrives, with the new end.
        """
        consumer = self._consumer
        assert consumer is not None, "refresh() before start()"
        wanted = frozenset(positions)
        if wanted != self._assigned:
            consumer.assign(list(wanted))
            self._assigned = wanted
            self.high = {tp: hw for tp, hw in self.high.items() if tp in wanted}
        if not wanted:
            return {}
        for tp, position in positions.items():
            consumer.seek(tp, max(position, self.high.get(tp, position)))
        await consumer.getmany(timeout_ms=int(wait_s * 1000), max_records=1)
        for tp in wanted:
            hw = consumer.highwater(tp)
            if hw is not None:
                self.high[tp] = max(hw, self.high.get(tp, hw))
        return dict(self.high)
