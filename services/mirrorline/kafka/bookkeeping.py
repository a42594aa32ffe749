"""Appends bookkeeping records (offset syncs, offset-map runs) to a one-partition topic.

One batch in flight at a time keeps records in order on the single partition; each batch
carries everything queued so far, because a per-record send would cost more CPU than the
bookkeeping itself. Failed sends are logged, not retried: both kinds of records are
advisory (a missing one makes translation conservative, never wrong).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer

from mirrorline.core.offset_syncs import OffsetSyncPlanner
from mirrorline.kafka.written import Written
from mirrorline.v1 import offset_map_pb2

log = logging.getLogger(__name__)

#: Upper bound of records per produce batch (bookkeeping records are tens of bytes).
MAX_PER_BATCH = 10_000

Item = tuple[bytes | None, bytes]


class BatchAppender:
    """Subclasses say what is queued (`_pending`) and hand it over (`_take`)."""

    def __init__(self, producer: AIOKafkaProducer, topic: str) -> None:
        self.topic = topic
        self._producer = producer
        self._wake = asyncio.Event()
        #: Batches taken and batches finished (in order: one batch in flight at a time). A
        #: flush waits for the batches that carry what was queued before it, not for a
        #: moment when nothing is queued, which a busy flow may never reach.
        self._taken = 0
        self._finished = Written()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    def _pending(self) -> int:
        raise NotImplementedError

    def _take(self, limit: int) -> list[Item]:
        raise NotImplementedError

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"append -> {self.topic}")

    def wake(self) -> None:
        if self._pending():
            self._wake.set()

    async def flush(self, timeout: float = 10.0) -> None:
        """Wait until everything queued before this call is acknowledged (or `timeout`
        passes). What is queued now goes out, oldest first, in the next batches taken."""
        pending = self._pending()
        wanted = self._taken + -(-pending // MAX_PER_BATCH)
        self.wake()
        if not await self._finished.wait(wanted, timeout):
            log.warning("%d records for %s not written within %.0fs", self._pending(),
                        self.topic, timeout)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending():
                items = self._take(MAX_PER_BATCH)
                self._taken += 1
                batch = self._producer.create_batch()
                for key, value in items:
                    if batch.append(key=key, value=value, timestamp=None, headers=[]) is None:
                        await self._send(batch, len(items))
                        batch = self._producer.create_batch()
                        batch.append(key=key, value=value, timestamp=None, headers=[])
                await self._send(batch, len(items))
                self._finished.reached(self._taken)

    async def _send(self, batch: Any, count: int) -> None:
        try:
            await (await self._producer.send_batch(batch, self.topic, partition=0))
            self.sent += count
        except Exception as exc:
            log.warning("records not written to %s: %r", self.topic, exc)


class OffsetSyncSender(BatchAppender):
    """MM2's offset syncs, as `OffsetSyncPlanner` decides them."""

    def __init__(self, planner: OffsetSyncPlanner, producer: AIOKafkaProducer,
                 topic: str) -> None:
        super().__init__(producer, topic)
        self.planner = planner

    def _pending(self) -> int:
        return self.planner.pending_count

    def _take(self, limit: int) -> list[Item]:
        return [(s.encode_key(), s.encode_value()) for s in self.planner.take_pending(limit)]

    async def flush(self, timeout: float = 10.0) -> None:
        """Promote delayed syncs first: a clean stop leaves every partition exactly synced."""
        self.planner.promote_delayed()
        await super().flush(timeout)


class OffsetMapWriter(BatchAppender):
    """Mirrorline's dense offset map: where every acknowledged run of records landed.

    Runs are coalesced per partition and published at most every `interval_s` (and on
    flush): steady replication is one contiguous run, so a partition costs one small
    record per interval however many batches it copies, and the map topic stays cheap to
    read in full when a checkpointer starts. A partition's first run is published at once:
    until a partition has a mapped point, a new owner after a crash must match its remote
    partition from the start (`kafka/unmapped_tail.py`), and its durable progress may
    already be ahead of any mapping.
    """

    def __init__(self, producer: AIOKafkaProducer, topic: str, *,
                 interval_s: float = 1.0) -> None:
        super().__init__(producer, topic)
        self.interval_s = interval_s
        self._queue: dict[tuple[str, int], offset_map_pb2.OffsetMapRecord] = {}
        self._timer: asyncio.TimerHandle | None = None
        #: Partitions with a run queued or published by this writer.
        self._mapped: set[tuple[str, int]] = set()

    def _pending(self) -> int:
        return len(self._queue)

    def _take(self, limit: int) -> list[Item]:
        items: list[Item] = []
        while self._queue and len(items) < limit:
            (topic, partition), message = next(iter(self._queue.items()))
            del self._queue[(topic, partition)]
            items.append((f"{topic}/{partition}".encode(), message.SerializeToString()))
        return items

    def wake(self) -> None:
        """Publish after the interval (coalescing what arrives meanwhile)."""
        if self._pending() and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._due)

    def _due(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().wake()

    async def flush(self, timeout: float = 10.0) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().wake()
        await super().flush(timeout)

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await super().stop()

    def acknowledged(self, topic: str, partition: int, offsets: Sequence[int],
                     downstream_base: int, *, covered_from: int = -1) -> None:
        """Queue the runs of one acknowledged batch: upstream `offsets` (in order) were
        written to `downstream_base`, `downstream_base + 1`, ...

        `covered_from` (when >= 0): the source has no record from there to `offsets[0]`.
        Such a gap before the first run is published as an empty run at `covered_from`, so
        a group committed inside it (a compacted topic's first records) translates exactly
        instead of falling before the map's history.
        """
        key = (topic, partition)
        first_run = key not in self._mapped
        self._mapped.add(key)
        message = self._queue.get(key)
        if message is None:
            message = self._queue[(topic, partition)] = offset_map_pb2.OffsetMapRecord(
                topic=topic, partition=partition)
        first, last = offsets[0], offsets[-1]
        if 0 <= covered_from < first:
            _append_run(message, covered_from, 0, downstream_base)
        if last - first + 1 == len(offsets):
            _append_run(message, first, len(offsets), downstream_base)
        else:  # gaps upstream (compaction, transaction markers): one run per stretch
            start, run_first = 0, first
            for i in range(1, len(offsets) + 1):
                if i == len(offsets) or offsets[i] != offsets[i - 1] + 1:
                    _append_run(message, run_first, i - start, downstream_base + start)
                    if i < len(offsets):
                        start, run_first = i, offsets[i]
        if first_run:
            self._due()  # now, with whatever else is queued
        else:
            self.wake()


def _append_run(message: offset_map_pb2.OffsetMapRecord, upstream: int, count: int,
                downstream: int) -> None:
    """Add a run, extending the previous one when both sides continue it."""
    if message.runs:
        last = message.runs[-1]
        if (last.upstream_start + last.count == upstream
                and last.downstream_start + last.count == downstream):
            last.count += count
            return
    message.runs.add(upstream_start=upstream, count=count, downstream_start=downstream)
