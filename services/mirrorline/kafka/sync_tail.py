"""The newest offset sync of each partition, read from the end of the offset-syncs topic.

Offset syncs are published as soon as the target acknowledged a record that needs one
(MM2's rule: at least every `offset.lag.max` records), so the newest sync of a busy
partition is at most about a hundred records behind what the target holds -- a closer
anchor for the tail match than the offset map, which is published once a second. Only
the last `window` records of the topic are read: a partition with no sync among them has
been quiet for long, and the offset map speaks for it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from aiokafka import TopicPartition

from mirrorline.core.bad_records import BadRecords
from mirrorline.core.wire import OffsetSync, valid_sync
from mirrorline.kafka.ranges import Range, read_ranges
from mirrorline.kafka.watermarks import high_watermarks

log = logging.getLogger(__name__)

#: How many of the newest offset-sync records are read.
SYNC_WINDOW = 50_000

SyncKey = tuple[str, int]


async def newest_syncs(consumer_kwargs: Mapping[str, Any], topic: str, *,
                       window: int = SYNC_WINDOW, timeout: float = 15.0,
                       bad: BadRecords | None = None) -> dict[SyncKey, OffsetSync]:
    """(upstream topic, partition) -> its newest offset sync among the last `window`.

    A record that does not decode or cannot be true (a negative offset) is reported once
    through `bad` (pass the same one to every call) and skipped."""
    bad = bad if bad is not None else BadRecords(f"offset sync reader ({topic})")
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
        sync = bad.decode(record.topic, record.partition, record.offset,
                          functools.partial(valid_sync, record.key, record.value))
        if sync is not None:
            newest[sync.topic_partition] = sync
    return newest
