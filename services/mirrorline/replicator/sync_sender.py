"""Publishes planned offset syncs to the MM2 offset-syncs topic, a batch at a time.

What to publish and when is decided by `mirrorline.core.offset_syncs.OffsetSyncPlanner`;
this task moves its outbox onto the wire. The topic has a single partition, so one batch
in flight at a time keeps the syncs in order; each batch carries everything queued so
far (a per-record send would cost more CPU than the whole sync rule). The planner's
outbox bound is the back-pressure when the offset-syncs cluster is slow.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaProducer

from mirrorline.core.offset_syncs import OffsetSyncPlanner

log = logging.getLogger(__name__)

#: Upper bound of syncs per produce batch (a sync record is ~40 bytes).
MAX_SYNCS_PER_BATCH = 10_000


class OffsetSyncSender:
    def __init__(self, planner: OffsetSyncPlanner, producer: AIOKafkaProducer, topic: str) -> None:
        self.planner = planner
        self.topic = topic
        self._producer = producer
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"offset syncs -> {self.topic}")

    def wake(self) -> None:
        if self.planner.pending_count:
            self._idle.clear()
            self._wake.set()

    async def flush(self, timeout: float = 10.0) -> None:
        """Promote delayed syncs and wait until every queued one is acknowledged."""
        self.planner.promote_delayed()
        self.wake()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            log.warning("%d offset syncs not written within %.0fs", self.planner.pending_count,
                        timeout)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.planner.pending_count:
                syncs = self.planner.take_pending(MAX_SYNCS_PER_BATCH)
                batch = self._producer.create_batch()
                for sync in syncs:
                    if batch.append(key=sync.encode_key(), value=sync.encode_value(),
                                    timestamp=None, headers=[]) is None:
                        await self._send(batch, len(syncs))
                        batch = self._producer.create_batch()
                        batch.append(key=sync.encode_key(), value=sync.encode_value(),
                                     timestamp=None, headers=[])
                await self._send(batch, len(syncs))
            self._idle.set()

    async def _send(self, batch: object, count: int) -> None:
        try:
            await (await self._producer.send_batch(batch, self.topic, partition=0))
            self.sent += count
        except Exception as exc:
            log.warning("offset syncs not written to %s: %r", self.topic, exc)
