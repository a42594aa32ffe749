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
    try:  # closed also after a failed start: it holds a client (aiokafka logs it unclosed)
        await consumer.start()
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

