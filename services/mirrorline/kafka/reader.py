"""Read a topic from the beginning up to its end, without trusting ListOffsets.

Internal topics (progress, offset syncs, checkpoints, the control log) are rebuilt into
memory by reading them completely. "The end" is taken from the high watermark that
each fetch response carries, which every Kafka-compatible broker gets right, rather
than from a ListOffsets(latest) request, which some do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from mirrorline.kafka.metadata import partitions_by_topic
from mirrorline.kafka.records import Record

#: How long a fetch of a tailed topic waits for records before the broker answers empty.
#: Records are answered the moment they arrive whatever this is, so it costs no reaction
#: time; it only sets how often an idle tail asks (at 100 ms, each of the few tails every
#: service keeps made 10 fetches a second, most of an idle service's CPU).
TAIL_WAIT_MS = 500
#: How often aiokafka's fetch routine of a tail wakes with nothing to do
#: (`consumer_timeout_ms`, 200 ms by default). Everything it waits for wakes it anyway (a
#: fetch answered, records taken, an assignment, a seek, a resume), so at 200 ms each idle
#: consumer only spun five times a second.
TAIL_ROUTINE_MS = 1000


class TopicReader:
    """Reads every partition of one topic from the beginning; can keep tailing it."""

    def __init__(self, consumer_kwargs: Mapping[str, Any], topic: str, *,
                 tail_wait_ms: int = TAIL_WAIT_MS) -> None:
        kwargs = dict(consumer_kwargs)
        kwargs.pop("group_id", None)
        kwargs["enable_auto_commit"] = False
        kwargs["auto_offset_reset"] = "earliest"
        #: Reading to the end waits at most this long on an empty partition; tailing waits
        #: longer (`tail_wait_ms`) -- unless the file sets fetch.max.wait.ms for the client.
        self._tail_wait_ms = kwargs.get("fetch_max_wait_ms", tail_wait_ms)
        kwargs.setdefault("fetch_max_wait_ms", 100)
        kwargs.setdefault("consumer_timeout_ms", TAIL_ROUTINE_MS)
        self.topic = topic
        #: read_committed: the end is the last stable offset, so a transaction left open
        #: (by a crashed producer, until the coordinator aborts it) does not stall the read.
        self._committed = kwargs.get("isolation_level") == "read_committed"
        self._consumer = AIOKafkaConsumer(**kwargs)
        self._tps: list[TopicPartition] = []

    async def start(self, partitions: int | None = None,
                    resume_at: Mapping[int, int] | None = None) -> None:
        """Assign every partition, from the beginning or from `resume_at` (partition ->
        next offset to read)."""
        await self._consumer.start()
        await self._assign(partitions, resume_at)

    async def _assign(self, partitions: int | None,
                      resume_at: Mapping[int, int] | None) -> None:
        if partitions is None:
            known = await partitions_by_topic(self._consumer, [self.topic])
            partitions = len(known.get(self.topic, []))
        if partitions == 0:
            raise LookupError(f"topic {self.topic!r} does not exist")
        self._tps = [TopicPartition(self.topic, p) for p in range(partitions)]
        self._consumer.assign(self._tps)
        await self._consumer.seek_to_beginning(*self._tps)
        for tp in self._tps:
            if resume_at and tp.partition in resume_at:
                self._consumer.seek(tp, resume_at[tp.partition])

    async def start_if_exists(self, partitions: int,
                              resume_at: Mapping[int, int] | None = None) -> bool:
        """`start`, if the cluster's metadata shows the topic now; False (the consumer
        connected, nothing assigned) if not. A consumer assigned a missing topic waits for
        it without end, refreshing its metadata every 100 ms meanwhile."""
        await self._consumer.start()
        if not await self.exists():
            return False
        await self._assign(partitions, resume_at)
        return True

    async def stop(self, timeout: float = 2.0) -> None:
        """Close the consumer; bounded, as a close may wait on an unreachable cluster."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._consumer.stop(), timeout)

    async def __aenter__(self) -> TopicReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _end(self, tp: TopicPartition) -> int | None:
        """The end of `tp` as of the latest fetch: its high watermark, or under
        read_committed its last stable offset (an open transaction must not stall a read)."""
        high: int | None = self._consumer.highwater(tp)
        if self._committed:
            stable: int | None = self._consumer.last_stable_offset(tp)
            high = stable if stable is not None and stable >= 0 else high
        return high

    async def caught_up(self) -> bool:
        for tp in self._tps:
            high = self._end(tp)
            if high is None or await self._consumer.position(tp) < high:
                return False
        return True

    async def exists(self) -> bool:
        """Whether the cluster's metadata shows the topic now (fresh metadata, not the
        consumer's cache); raises a KafkaError when no broker answers."""
        known = await partitions_by_topic(self._consumer, [self.topic])
        return bool(known.get(self.topic))

    def end_offsets(self) -> dict[int, int]:
        """Partition -> high watermark, as of the latest fetch (partitions not fetched yet
        are missing)."""
        out: dict[int, int] = {}
        for tp in self._tps:
            high = self._consumer.highwater(tp)
            if high is not None:
                out[tp.partition] = high
        return out

    async def read_to_end(self, timeout: float = 60.0) -> list[Record]:
        """Everything up to the end as it was when the read began (records arriving
        meanwhile may be included).

        Each partition's end is fixed by the first fetch that answers for it. Waiting
        instead until a fetch brings nothing new never finishes on a topic that is being
        written all the time -- the progress topic while the partitions that stay keep
        copying, the offset syncs of a busy flow -- and a partition start would hang
        until the timeout."""
        deadline = time.monotonic() + timeout
        out: list[Record] = []
        ends: dict[TopicPartition, int] = {}
        while True:
            batches = await self._consumer.getmany(timeout_ms=200)
            for records in batches.values():
                out.extend(records)
            for tp in self._tps:
                if tp not in ends and (end := self._end(tp)) is not None:
                    ends[tp] = end
            if len(ends) == len(self._tps) and await self._reached(ends):
                return out
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {self.topic!r} to its end took over {timeout:.0f}s")

    async def _reached(self, ends: Mapping[TopicPartition, int]) -> bool:
        for tp, end in ends.items():
            if await self._consumer.position(tp) < end:
                return False
        return True

    async def poll(self, timeout_ms: int = 1000) -> list[Record]:
        """What arrived since the last read (tailing: fetches wait `TAIL_WAIT_MS` now)."""
        _set_fetch_wait(self._consumer, self._tail_wait_ms)
        batches = await self._consumer.getmany(timeout_ms=timeout_ms)
        return [r for records in batches.values() for r in records]


def _set_fetch_wait(consumer: AIOKafkaConsumer, wait_ms: int) -> None:
    """Change how long the consumer's next fetches wait on the broker. aiokafka reads the
    setting from its fetcher for every request but offers no setter: this sets it there
    (an aiokafka without that attribute keeps the wait it was built with)."""
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is not None and hasattr(fetcher, "_fetch_max_wait_ms"):
        fetcher._fetch_max_wait_ms = wait_ms


async def read_topic(consumer_kwargs: Mapping[str, Any], topic: str, *,
                     partitions: int | None = None, timeout: float = 60.0) -> list[Record]:
    reader = TopicReader(consumer_kwargs, topic)
    try:  # a missing topic fails start(): its consumer is closed all the same
        await reader.start(partitions)
        return await reader.read_to_end(timeout)
    finally:
        await reader.stop()
