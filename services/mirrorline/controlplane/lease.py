"""The controller lease: the leader's heartbeat, on its own compacted topic.

Keeping renewals out of the control log keeps the log small (it is an event log and is
replayed by every service at start). The lease only tells standbys whether the leader is
alive; who the leader *is* is decided in the control log, where fencing happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaProducer

from mirrorline.core.bad_records import BadRecords
from mirrorline.kafka.admin import ClusterAdmin, TopicSpec
from mirrorline.kafka.reader import TopicReader
from mirrorline.kafka.records import Record
from mirrorline.v1 import control_pb2

log = logging.getLogger(__name__)

LEASE_TOPIC = "mirrorline.controller-lease.internal"
_KEY = b"leader"


class LeaseBoard:
    """Follows the lease topic; the leader also renews through it."""

    def __init__(self, *, consumer_kwargs: Mapping[str, Any], producer_kwargs: Mapping[str, Any],
                 topic: str = LEASE_TOPIC) -> None:
        self.topic = topic
        self._consumer_kwargs = dict(consumer_kwargs)
        self._position = -1
        self._reader = TopicReader(consumer_kwargs, topic)
        self._producer = AIOKafkaProducer(**dict(producer_kwargs, acks="all"))
        self._task: asyncio.Task[None] | None = None
        self.bad_records = BadRecords(f"controller lease reader ({topic})")
        #: epoch -> (latest lease seen, monotonic time it was read)
        self.latest: dict[int, tuple[control_pb2.LeaderLease, float]] = {}

    @staticmethod
    async def ensure_topic(admin: ClusterAdmin, replication_factor: int,
                           topic: str = LEASE_TOPIC) -> None:
        await admin.ensure_topic(TopicSpec(topic, 1, replication_factor,
                                           {"cleanup.policy": "compact"}))

    async def start(self) -> None:
        await self._reader.start(partitions=1)
        for record in await self._reader.read_to_end():
            self._observe(record, stale=True)
            self._position = record.offset
        await self._producer.start()
        self._task = asyncio.create_task(self._tail(), name="controller lease")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._reader.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._producer.stop(), 1.0)

    def last_renewal(self, epoch: int) -> float | None:
        """Monotonic time a renewal for `epoch` was last read, or None."""
        seen = self.latest.get(epoch)
        return None if seen is None else seen[1]

    def resigned(self, epoch: int) -> bool:
        """The leader of `epoch` gave its lease up (a renewal with lease_ms 0)."""
        seen = self.latest.get(epoch)
        return seen is not None and seen[0].lease_ms == 0

    async def renew(self, lease: control_pb2.LeaderLease, timeout: float) -> None:
        lease.renewed_at_ms = int(time.time() * 1000)
        await asyncio.wait_for(self._producer.send_and_wait(
            self.topic, lease.SerializeToString(), key=_KEY, partition=0), timeout)

    async def _tail(self) -> None:
        position = self._position  # offset of the last renewal read
        while True:
            try:
                records = await self._reader.poll(timeout_ms=500)
                for record in records:
                    self._observe(record, stale=False)
                    position = record.offset
                end = self._reader.end_offsets().get(0)
                if not records and end is not None and end <= position:
                    # The topic went backwards (the home cluster restarted empty, say):
                    # read the new one from its start, or renewals would go unseen.
                    log.warning("the controller lease topic %s went backwards (it ends at "
                                "offset %d, offset %d was read); reading it again from the "
                                "start", self.topic, end, position)
                    await self._reader.stop()
                    self._reader = TopicReader(self._consumer_kwargs, self.topic)
                    await self._reader.start(partitions=1)
                    position = -1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("reading the controller lease failed (%r); retrying", exc)
                await asyncio.sleep(1.0)

    def _observe(self, record: Record, *, stale: bool) -> None:
        def parse() -> control_pb2.LeaderLease:
            parsed = control_pb2.LeaderLease()
            parsed.ParseFromString(record.value or b"")
            if parsed.lease_ms < 0:
                raise ValueError(f"lease_ms {parsed.lease_ms} is negative")
            return parsed

        lease = self.bad_records.decode(record.topic, record.partition, record.offset, parse)
        if lease is None:
            return
        # Renewals read during the initial replay say nothing about liveness *now*.
        self.latest[lease.epoch] = (lease, float("-inf") if stale else time.monotonic())
