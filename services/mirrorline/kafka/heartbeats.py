"""The newest heartbeat on each heartbeat topic of a cluster.

Topology needs only the latest record per topic. A heartbeat topic has one partition and
grows by one small record per interval, so the reader starts a couple of records before
the end and reads forward to the high watermark that fetch responses carry. It never
trusts ListOffsets(latest) to be the true end (some brokers answer short of it): starting
early and reading forward finds the newest record either way.

A record that does not decode as an MM2 heartbeat (written by someone else) is reported
once with topic, partition and offset and skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from mirrorline.core.errors import WireFormatError
from mirrorline.core.wire import Heartbeat
from mirrorline.kafka.metadata import partitions_by_topic
from mirrorline.kafka.reader import TAIL_ROUTINE_MS, TAIL_WAIT_MS

log = logging.getLogger(__name__)

_BACK = 2


class NewestHeartbeats:
    """Keeps a consumer on a cluster and answers "newest heartbeat per topic" on demand."""

    def __init__(self, alias: str, consumer_kwargs: Mapping[str, Any]) -> None:
        kwargs = dict(consumer_kwargs)
        kwargs.pop("group_id", None)
        kwargs["enable_auto_commit"] = False
        kwargs.setdefault("fetch_max_wait_ms", TAIL_WAIT_MS)  # see TAIL_WAIT_MS
        kwargs.setdefault("consumer_timeout_ms", TAIL_ROUTINE_MS)
        self.alias = alias
        self._consumer = AIOKafkaConsumer(**kwargs)
        self._positions: dict[TopicPartition, int] = {}
        self._assigned: set[TopicPartition] = set()
        self.newest: dict[str, int | None] = {}
        self._reported: set[tuple[str, int, int]] = set()
        self._started = False

    async def start(self) -> None:
        await self._consumer.start()
        self._started = True

    async def stop(self) -> None:
        # Also after a failed start: the consumer holds a client that must be closed.
        await self._consumer.stop()
        self._started = False

    async def all_topics(self) -> list[str]:
        return sorted(await self.all_partitions())

    async def all_partitions(self) -> dict[str, list[int]]:
        """Every topic of the cluster with its partitions, from fresh metadata."""
        cluster = await self._consumer._client.fetch_all_metadata()
        return {t: sorted(cluster.partitions_for_topic(t) or ()) for t in cluster.topics()}

    async def refresh(self, topics: Iterable[str], timeout: float = 5.0,
                      partitions: Mapping[str, list[int]] | None = None
                      ) -> dict[str, int | None]:
        """Read every partition of `topics` up to its end; returns topic -> newest heartbeat
        timestamp (None: no valid heartbeat on it). `partitions`: fresh metadata the
        caller has (`all_partitions`), saving a request."""
        wanted = sorted(set(topics))
        if partitions is None:
            found = await partitions_by_topic(self._consumer, wanted)
        else:
            found = {t: list(partitions[t]) for t in wanted if partitions.get(t)}
        tps = [TopicPartition(t, p) for t, parts in found.items() for p in parts]
        if not tps:
            self.newest = {t: None for t in wanted}
            return self.newest
        # Between refreshes the partitions are paused: fetching on meanwhile filled the
        # consumer's buffer with heartbeats nobody took, and aiokafka then woke every
        # 100 ms until they were (most of an idle topology's cost).
        self._consumer.resume(*[tp for tp in tps if tp in self._assigned])
        if set(tps) != self._assigned:
            # Only when the partitions change: an assignment (and a seek) drops what the
            # consumer fetched ahead, and every refresh would fetch it again.
            new = [tp for tp in tps if tp not in self._positions]
            self._consumer.assign(tps)
            self._assigned = set(tps)
            if new:
                ends = await self._consumer.end_offsets(new)
                for tp in new:
                    self._positions[tp] = max(0, ends.get(tp, 0) - _BACK)
            for tp in tps:
                self._consumer.seek(tp, self._positions[tp])
        deadline = time.monotonic() + timeout
        while True:
            batches = await self._consumer.getmany(timeout_ms=100)
            for tp, records in batches.items():
                for record in records:
                    self._take(record)
                if records:
                    self._positions[tp] = records[-1].offset + 1
            # Caught up as of the answer just taken: done, without the empty fetch that
            # waiting for one more answer sent on every read.
            if await self._caught_up(tps):
                break
            if time.monotonic() > deadline:
                break
        self._consumer.pause(*tps)
        self.newest = {t: self.newest.get(t) for t in wanted}
        return self.newest

    async def _caught_up(self, tps: list[TopicPartition]) -> bool:
        for tp in tps:
            high = self._consumer.highwater(tp)
            if high is None or await self._consumer.position(tp) < high:
                return False
        return True

    def _take(self, record: Any) -> None:
        try:
            beat = Heartbeat.decode(record.key, record.value)
        except WireFormatError as exc:
            where = (record.topic, record.partition, record.offset)
            if where not in self._reported:
                self._reported.add(where)
                log.warning("%s: skipping malformed heartbeat at topic %s partition %d offset "
                            "%d: %s", self.alias, *where, exc)
            return
        current = self.newest.get(record.topic)
        if current is None or beat.timestamp > current:
            self.newest[record.topic] = beat.timestamp


async def newest_heartbeats(alias: str, consumer_kwargs: Mapping[str, Any],
                            topics: Iterable[str]) -> dict[str, int | None]:
    """One-shot: the newest heartbeat timestamp of each topic."""
    reader = NewestHeartbeats(alias, consumer_kwargs)
    try:  # stopped also after a failed start (see `stop`)
        await reader.start()
        return await reader.refresh(topics)
    finally:
        await reader.stop()
