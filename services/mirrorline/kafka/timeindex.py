"""The first offset of a partition whose record is at or after a point in time.

The broker's time index (ListOffsets by timestamp) answers this directly, but the answer
is checked against the records themselves -- the record it names must be at or after the
time and its predecessor before it -- because not every broker gets it right (the local
test broker always answers 0). A wrong answer falls back to reading the partition from
its start: slower, but never wrong.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from mirrorline.core.failover import first_at_or_after, verify_time_answer


@dataclass(frozen=True)
class TimeAnswer:
    offset: int          # the first offset at/after the time (the log end if none is)
    basis: str           # how it was found


class TimeIndex:
    """One consumer for many lookups on one cluster (open with `async with`)."""

    def __init__(self, consumer_kwargs: Mapping[str, Any]) -> None:
        kwargs = dict(consumer_kwargs, enable_auto_commit=False, fetch_max_wait_ms=100)
        kwargs.pop("group_id", None)
        self._consumer = AIOKafkaConsumer(**kwargs)

    async def __aenter__(self) -> TimeIndex:
        await self._consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def first_at_or_after(self, tp: TopicPartition, timestamp_ms: int,
                                timeout: float = 60.0) -> TimeAnswer:
        consumer = self._consumer
        consumer.assign([tp])
        start = (await consumer.beginning_offsets([tp]))[tp]
        end = await self._high_watermark(tp, start, timeout)
        found = (await consumer.offsets_for_times({tp: timestamp_ms})).get(tp)
        candidate = end if found is None else found.offset
        if start <= candidate <= end:
            at = await self._timestamp_at(tp, candidate, end)
            before = await self._timestamp_at(tp, candidate - 1, end) if candidate > start \
                else None
            if verify_time_answer(candidate, at, before, timestamp_ms, start):
                return TimeAnswer(candidate, "the broker's time index (verified)")
        offset = await self._scan(tp, start, end, timestamp_ms, timeout)
        return TimeAnswer(end if offset is None else offset,
                          f"a search over the records (the broker's time index answered "
                          f"{candidate}, which the records contradict)")

    async def timestamp_at(self, tp: TopicPartition, offset: int) -> int | None:
        """Timestamp of the record at `offset` (None: no record there, or past the end)."""
        self._consumer.assign([tp])
        return await self._timestamp_at(tp, offset, offset + 1)

    async def _high_watermark(self, tp: TopicPartition, start: int, timeout: float) -> int:
        self._consumer.seek(tp, start)
        deadline = time.monotonic() + timeout
        while self._consumer.highwater(tp) is None and time.monotonic() < deadline:
            await self._consumer.getmany(tp, timeout_ms=200, max_records=1)
        high = self._consumer.highwater(tp)
        if high is None:
            raise TimeoutError(f"no fetch response for {tp.topic}-{tp.partition}")
        return int(high)

    async def _timestamp_at(self, tp: TopicPartition, offset: int, end: int) -> int | None:
        if offset < 0 or offset >= end:
            return None
        self._consumer.seek(tp, offset)
        for _ in range(50):
            batch = (await self._consumer.getmany(tp, timeout_ms=200, max_records=1)).get(tp)
            if batch:
                record = batch[0]
                # A compacted-away or aborted offset: the next record stands in for it.
                return int(record.timestamp) if record.offset >= offset else None
        return None

    async def _scan(self, tp: TopicPartition, start: int, end: int, timestamp_ms: int,
                    timeout: float) -> int | None:
        self._consumer.seek(tp, start)
        deadline = time.monotonic() + timeout
        position = start
        while position < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"searching {tp.topic}-{tp.partition} for a time took "
                                   f"over {timeout:.0f}s")
            batch = (await self._consumer.getmany(tp, timeout_ms=500)).get(tp, [])
            found = first_at_or_after(((r.offset, r.timestamp) for r in batch), timestamp_ms)
            if found is not None:
                return found
            if batch:
                position = batch[-1].offset + 1
        return None
