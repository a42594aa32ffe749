"""Durable replication progress, stored where MM2 keeps it.

The next source offset of each partition lives on the target cluster in
`mm2-offsets.<source>.internal`, in the Kafka Connect source-offset format MM2 itself
writes (see `mirrorline.core.progress`). A deployment can therefore move from MM2 to
Mirrorline (or back) without copying anything twice.

Progress is only ever recorded for records the target acknowledged. Writes go through
a producer of their own, so they never occupy the request slot that data batches need,
and they are coalesced: a flusher writes the newest position of every partition that
moved, waits for that round to be acknowledged, then writes the next round. After a
crash a partition therefore replays at most the batch in flight plus the batches
acknowledged since the last completed round -- the bound the crash test checks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaProducer

from mirrorline.core.bad_records import BadRecords
from mirrorline.core.progress import (
    SOURCE_CONNECTOR,
    decode_source_progress,
    encode_offset,
    progress_problem,
    progress_topic,
    source_offset_key,
)
from mirrorline.kafka.admin import ClusterAdmin, TopicSpec
from mirrorline.kafka.reader import read_topic
from mirrorline.kafka.written import Written

log = logging.getLogger(__name__)

#: Kafka Connect's default partition count for its offsets topic.
PROGRESS_PARTITIONS = 25

TopicPartitionKey = tuple[str, int]


class ProgressStore:
    def __init__(self, *, source_alias: str, producer: AIOKafkaProducer,
                 consumer_kwargs: Mapping[str, Any], replication_factor: int) -> None:
        self.source_alias = source_alias
        self.topic = progress_topic(source_alias)
        self._producer = producer
        self._consumer_kwargs = consumer_kwargs
        self._replication_factor = replication_factor
        self._dirty: dict[TopicPartitionKey, int] = {}
        self._wake = asyncio.Event()
        #: Saves so far, and how many of the first of them are durable: a flush waits for
        #: the saves made before it, not for a moment when nobody saves (partitions that
        #: keep copying keep saving, and such a moment may never come).
        self._saved = 0
        self._durable = Written()
        self._task: asyncio.Task[None] | None = None
        self.failures = 0

    async def ensure_topic(self, admin: ClusterAdmin) -> None:
        await admin.ensure_topic(TopicSpec(self.topic, PROGRESS_PARTITIONS,
                                           self._replication_factor,
                                           {"cleanup.policy": "compact"}))

    async def load(self) -> dict[TopicPartitionKey, int]:
        """Next source offset per partition, as last durably recorded."""
        return await read_progress(self._consumer_kwargs, self.source_alias)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"progress -> {self.topic}")

    def save(self, topic: str, partition: int, next_offset: int) -> None:
        """Record (soon) that everything below `next_offset` is on the target.

        Offset 0 -- a partition let go before anything of it was copied -- records
        nothing: MM2's progress names the last offset copied, and no record is how it says
        "none yet"."""
        if next_offset < 1:
            return
        self._dirty[(topic, partition)] = next_offset
        self._saved += 1
        self._wake.set()

    async def flush(self, timeout: float = 10.0) -> None:
        """Wait until every position saved before this call is durable (or `timeout`
        passes); positions saved meanwhile are not waited for."""
        if self._task is None:
            return
        wanted = self._saved
        self._wake.set()
        if not await self._durable.wait(wanted, timeout):
            log.warning("progress of %d partitions not written within %.0fs; they will "
                        "replay a little after a restart", len(self._dirty), timeout)

    async def stop(self) -> None:
        await self.flush()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._dirty:  # every save so far went out in a round that succeeded
                self._durable.reached(self._saved)
                continue
            upto = self._saved
            batch, self._dirty = self._dirty, {}
            failed = await self._write(batch)
            if failed:
                self.failures += len(failed)
                log.warning("%d progress writes failed (first: %r); retrying", len(failed),
                            next(iter(failed.values())))
                for key in failed:  # keep the newest position, whichever is later
                    self._dirty.setdefault(key, batch[key])
                await asyncio.sleep(1.0)
                self._wake.set()
            else:
                self._durable.reached(upto)

    async def _write(self, batch: Mapping[TopicPartitionKey, int]
                     ) -> dict[TopicPartitionKey, BaseException]:
        """Send one round; returns the writes that failed (to retry). Nothing here ends
        the writer: a dead writer would leave every later save unwritten and every flush
        waiting out its timeout."""
        sent: dict[TopicPartitionKey, asyncio.Future[Any]] = {}
        failed: dict[TopicPartitionKey, BaseException] = {}
        for (topic, partition), next_offset in batch.items():
            try:
                key = source_offset_key(self.source_alias, topic, partition)
                value = encode_offset(next_offset - 1)
            except ValueError as exc:  # cannot be written, now or ever: say so, drop it
                log.error("progress of %s-%d not recordable: %s", topic, partition, exc)
                continue
            try:
                sent[(topic, partition)] = await self._producer.send(self.topic, key=key,
                                                                     value=value)
            except Exception as exc:  # e.g. no metadata for the topic yet
                failed[(topic, partition)] = exc
        results = await asyncio.gather(*sent.values(), return_exceptions=True)
        for k, result in zip(sent, results, strict=True):
            if isinstance(result, BaseException):
                failed[k] = result
        return failed


async def read_progress(target_consumer: Mapping[str, Any], source_alias: str
                        ) -> dict[TopicPartitionKey, int]:
    """Where replication from `source_alias` has reached, per source partition: the next
    offset to copy, as recorded on the target (MM2's or Mirrorline's records alike)."""
    records = await read_topic(target_consumer, progress_topic(source_alias))
    found: dict[TopicPartitionKey, int] = {}
    bad = BadRecords(f"progress reader ({source_alias})")
    for record in records:
        problem = progress_problem(record.key, record.value)
        if problem is not None:
            bad.skip(record.topic, record.partition, record.offset, problem)
            continue
        progress = decode_source_progress(record.key, record.value)
        if (progress is None or progress.connector != SOURCE_CONNECTOR
                or progress.cluster != source_alias):
            continue
        key = (progress.topic, progress.partition)
        if progress.last_offset is None:
            found.pop(key, None)
        else:
            found[key] = progress.last_offset + 1
    return found
