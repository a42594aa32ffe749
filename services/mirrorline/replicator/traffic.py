"""The records' way through one flow: fetched into their partitions' pumps, acknowledged
into the bookkeeping, metrics and spans.

Kept apart from `mirrorline.replicator.flow`, which decides what the flow owns and when it
runs; this is only what happens to records once it does. The delivery loop calls `fetch`
when it wants records and `on_ack` for every batch the target acknowledged.

Two ways in: with `mirrorline.batch.path` = off, aiokafka's consumer fetches and decodes
every record; otherwise the flow's own `BatchFetcher` fetches record batches as bytes and
hands the pumps source batches to forward as they are (and records where a batch takes the
record path). Either way a partition's lag, metrics and bookkeeping are the same.

Back-pressure: fetching for a partition pauses while `MAX_BACKLOG_CHUNKS` fetched chunks
wait in its pump (the partition is "throttled") and resumes once a batch of it is
acknowledged with fewer waiting, so one slow target partition cannot fill memory with
records fetched for it. (The batch path simply does not fetch a partition with that many
chunks waiting: one fetch's worth of batches at most.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError, OffsetOutOfRangeError
from opentelemetry.trace import Tracer

from mirrorline.core.backoff import Backoff
from mirrorline.kafka.acked import FlowBookkeeping
from mirrorline.kafka.progress import ProgressStore
from mirrorline.replicator.batchfetch import BatchFetcher
from mirrorline.replicator.pump import Delivered, PartitionPump, PumpState
from mirrorline.replicator.shipment import SourceBatch
from mirrorline.replicator.source_faults import check_truncation, out_of_range
from mirrorline.replicator.tracing import trace_fetch, trace_produce
from mirrorline.telemetry.replication import PartitionMetrics, ReplicationMetrics

__all__ = ["MAX_BACKLOG_CHUNKS", "FlowTraffic"]

log = logging.getLogger(__name__)

#: Fetch for a partition pauses while this many fetched chunks wait in its pump.
MAX_BACKLOG_CHUNKS = 4


class FlowTraffic:
    """Fetching and acknowledging for the partitions in `pumps` (shared with the flow,
    which adds and removes them). `consumer`, `books` and `progress` are set while the
    flow's clients are open."""

    def __init__(self, name: str, pumps: Mapping[TopicPartition, PartitionPump],
                 pump_metrics: Mapping[TopicPartition, PartitionMetrics], *,
                 metrics: ReplicationMetrics, tracer: Tracer, backoff: Backoff) -> None:
        self.name = name
        self.consumer: AIOKafkaConsumer | None = None
        #: The batch path's fetcher (`mirrorline.batch.path` auto or on); None: the consumer
        #: fetches (off).
        self.fetcher: BatchFetcher | None = None
        self.books: FlowBookkeeping | None = None
        self.progress: ProgressStore | None = None
        #: Partitions whose fetching is paused because their pump is backed up.
        self.throttled: set[TopicPartition] = set()
        #: Set when the owned partitions change: `fetch` with none owned waits on it.
        self.assignment_changed = asyncio.Event()
        self._pumps = pumps
        self._pump_metrics = pump_metrics
        self._metrics = metrics
        self._tracer = tracer
        self._backoff = backoff
        self._fetch_attempt = 0

    # -- which partitions the consumer fetches (the batch path fetches from the pumps) -----
    def assign(self) -> None:
        """Fetch exactly the pumps' partitions, each from its pump's position."""
        consumer = self.consumer
        assert consumer is not None
        if self.fetcher is not None:
            self.fetcher.track({tp.topic for tp in self._pumps})
            return
        consumer.assign(list(self._pumps))
        for tp, pump in self._pumps.items():
            consumer.seek(tp, pump.fetch_position)
            if pump.state is not PumpState.RUNNING or tp in self.throttled:
                consumer.pause(tp)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        if self.consumer is not None and self.fetcher is None:
            self.consumer.pause(*partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Fetch again from each pump's position (those not throttled)."""
        consumer = self.consumer
        if consumer is None or self.fetcher is not None:
            return
        wanted = [tp for tp in partitions if tp in self._pumps]
        for tp in wanted:
            consumer.seek(tp, self._pumps[tp].fetch_position)
        consumer.resume(*(tp for tp in wanted if tp not in self.throttled))

    def fetch_waiters(self) -> list[asyncio.Future[Any]]:
        """The batch path's fetches under way (the delivery loop wakes when one ends)."""
        return self.fetcher.waiters() if self.fetcher is not None else []

    def highwater(self, tp: TopicPartition) -> int | None:
        """The source's high watermark from the latest fetch answer (None: none yet)."""
        if self.fetcher is not None:
            return self.fetcher.highwater.get(tp)
        return self.consumer.highwater(tp) if self.consumer is not None else None

    async def fetch(self, timeout_ms: int) -> None:
        """Hand newly fetched records to their pumps (waiting up to `timeout_ms` for some)."""
        consumer = self.consumer
        assert consumer is not None
        if not self._pumps:
            self.assignment_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.assignment_changed.wait(), timeout_ms / 1000.0)
            return
        if self.fetcher is not None:
            await self._fetch_batches(self.fetcher, timeout_ms)
            return
        started = time.time_ns()
        try:
            batches = await consumer.getmany(timeout_ms=timeout_ms)
            self._fetch_attempt = 0
        except OffsetOutOfRangeError as exc:
            lost = await out_of_range(consumer, self._pumps,
                                      exc.args[0] if exc.args else {}, self.progress)
            for tp, count in lost.items():
                if tp in self._pump_metrics:
                    self._metrics.lost(self._pump_metrics[tp], count)
            return
        except KafkaError as exc:
            delay = self._backoff.delay(self._fetch_attempt)
            self._fetch_attempt += 1
            log.warning("%s: fetch failed (%r); retrying in %.1fs", self.name, exc, delay)
            await asyncio.sleep(delay)
            return
        if not batches:
            return
        count = 0
        for tp, records in batches.items():
            pump = self._pumps.get(tp)
            if pump is None:
                continue
            count += len(records)
            self._metrics.fetched(self._pump_metrics[tp], records)
            pump.offer(records)
            if pump.backlog_chunks >= MAX_BACKLOG_CHUNKS and tp not in self.throttled:
                consumer.pause(tp)
                self.throttled.add(tp)
        trace_fetch(self._tracer, self.name, started, count, len(batches))

    def _wants_fetch(self, pump: PartitionPump) -> bool:
        return pump.state is PumpState.RUNNING and pump.backlog_chunks < MAX_BACKLOG_CHUNKS

    async def _fetch_batches(self, fetcher: BatchFetcher, timeout_ms: int) -> None:
        started = time.time_ns()
        answers = await fetcher.fetch(timeout_ms, self._wants_fetch)
        if answers.out_of_range and self.consumer is not None:
            lost = await out_of_range(self.consumer, self._pumps, answers.out_of_range,
                                      self.progress)
            for tp, count in lost.items():
                if tp in self._pump_metrics:
                    self._metrics.lost(self._pump_metrics[tp], count)
        count = 0
        for tp, (chunks, next_offset) in answers.chunks.items():
            pump = self._pumps.get(tp)
            metrics = self._pump_metrics.get(tp)
            if pump is None or metrics is None:
                continue
            for chunk in chunks:
                if isinstance(chunk, SourceBatch):
                    header = chunk.header
                    count += header.record_count
                    self._metrics.fetched_batch(metrics, header.record_count,
                                                header.size, header.base_timestamp,
                                                header.max_timestamp)
                else:
                    count += len(chunk)
                    self._metrics.fetched(metrics, chunk)
            pump.offer_fetch(chunks, next_offset)
        if count:
            trace_fetch(self._tracer, self.name, started, count, len(answers.chunks))

    def on_ack(self, pump: PartitionPump, delivered: Delivered) -> None:
        shipment, base = delivered.shipment, delivered.base_offset
        tp = TopicPartition(pump.source_topic, pump.partition)
        if self.books is not None:
            # Caught up: publish the exact position now so a group at the end of the
            # topic translates exactly, instead of waiting for the periodic flush.
            self.books.acknowledged(pump.source_topic, pump.partition, shipment.offsets(),
                                    base, caught_up=pump.idle and self.lag(tp, pump) == 0,
                                    covered_from=delivered.covered_from)
        metrics = self._pump_metrics.get(tp)
        if metrics is not None:
            if shipment.records is not None:
                self._metrics.acknowledged(metrics, shipment.records)
            else:
                self._metrics.acknowledged_batch(metrics, shipment.count,
                                                 shipment.min_timestamp,
                                                 shipment.max_timestamp)
        if tp in self.throttled and pump.backlog_chunks < MAX_BACKLOG_CHUNKS:
            self.throttled.discard(tp)
            if self.consumer is not None and tp in self._pumps and self.fetcher is None:
                self.consumer.resume(tp)
        trace_produce(self._tracer, self.name, pump, delivered)

    def lag(self, tp: TopicPartition, pump: PartitionPump) -> int | None:
        """Records on the source after the next one to copy; None before a fetch told."""
        high = self.highwater(tp)
        return None if high is None else max(0, high - pump.next_offset)

    async def watch(self, flush_interval_s: float, stopping: Callable[[], bool]) -> None:
        """Once a second until `stopping()`: catch silent source truncation and flush
        delayed offset syncs."""
        last_flush = time.monotonic()
        while not stopping():
            await asyncio.sleep(1.0)
            if self.consumer is not None:
                await check_truncation(self.consumer, self._pumps, self.highwater)
            if self.books is not None and time.monotonic() - last_flush >= flush_interval_s:
                last_flush = time.monotonic()
                self.books.flush_syncs()
