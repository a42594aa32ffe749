"""The newest offset sync of each partition, read from the end of the offset-syncs topic.

Offset syncs are published as soon as the target acknowledged a record that needs one
(MM2's rule: at least every `offset.lag.max` records), so the newest sync of a busy
partition is at most about a hundred records behind what the target holds -- a closer
anchor for the tail match than the offset map, which is published once a second. Only
the last `window` records of the topic are read: a partition with no sync among them has
been quiet for long, and the offset map speaks for it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aiokafka import TopicPartition

from mirrorline.core.errors import WireFormatError
from mirrorline.core.wire import OffsetSync
from mirrorline.kafka.ranges import Range, read_ranges
from mirrorline.kafka.watermarks import high_watermarks

log = logging.getLogger(__name__)

#: How many of the newest offset-sync records are read.
SYNC_WINDOW = 50_000

SyncKey = tuple[str, int]


async def newest_syncs(consumer_kwargs: Mapping[str, Any], topic: str, *,
                       window: int = SYNC_WINDOW, timeout: float = 15.0
                       ) -> dict[SyncKey, OffsetSync]:
    """(upstream topic, partition) -> its newest offset sync among the last `window`."""
    ends = await high_watermarks(consumer_kwargs, [topic], timeout=timeout)
    end = ends.get(TopicPartition(topic, 0))
    if not end:
        return {}
    tp = TopicPartition(topic, 0)
    tail = Range(max(0, end - window), window)
    await read_ranges(consumer_kwargs, {tp: tail}, timeout=timeout)
    if tail.error:
        log.info("reading the end of %s: %s; tails are matched from the offset map only",
                 topic, tail.error)
    newest: dict[SyncKey, OffsetSync] = {}
    for record in tail.records:
        try:
            sync = OffsetSync.decode(record.key, record.value)
        except WireFormatError as exc:
            log.warning("%s offset %d: invalid offset sync skipped: %s", topic, record.offset,
                        exc)
            continue
        newest[sync.topic_partition] = sync
    return newest
