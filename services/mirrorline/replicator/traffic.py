"""The records' way through one flow: fetched into their partitions' pumps, acknowledged
into the bookkeeping, metrics and spans.

Kept apart from `mirrorline.replicator.flow`, which decides what the flow owns and when it
runs; this is only what happens to records once it does. The delivery loop calls `fetch`
when it wants records and `on_ack` for every batch the target acknowledged.

Back-pressure: fetching for a partition pauses while `MAX_BACKLOG_CHUNKS` fetched chunks
wait in its pump (the partition is "throttled") and resumes once a batch of it is
acknowledged with fewer waiting, so one slow target partition cannot fill memory with
records fetched for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError, OffsetOutOfRangeError
from opentelemetry.trace import Tracer

from mirrorline.core.backoff import Backoff
from mirrorline.kafka.acked import FlowBookkeeping
from mirrorline.kafka.progress import ProgressStore
from mirrorline.replicator.pump import Delivered, PartitionPump
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

    async def fetch(self, timeout_ms: int) -> None:
        """Hand newly fetched records to their pumps (waiting up to `timeout_ms` for some)."""
        consumer = self.consumer
        assert consumer is not None
        if not self._pumps:
            self.assignment_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.assignment_changed.wait(), timeout_ms / 1000.0)
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

    def on_ack(self, pump: PartitionPump, delivered: Delivered) -> None:
        records, base = delivered.records, delivered.base_offset
        tp = TopicPartition(pump.source_topic, pump.partition)
        if self.books is not None:
            first, last = records[0].offset, records[-1].offset
            upstream: Sequence[int] = (range(first, last + 1)
                                       if last - first + 1 == len(records)
                                       else [r.offset for r in records])
            # Caught up: publish the exact position now so a group at the end of the
            # topic translates exactly, instead of waiting for the periodic flush.
            self.books.acknowledged(pump.source_topic, pump.partition, upstream, base,
                                    caught_up=pump.idle and self.lag(tp, pump) == 0,
                                    covered_from=delivered.covered_from)
        metrics = self._pump_metrics.get(tp)
        if metrics is not None:
            self._metrics.acknowledged(metrics, records)
        if tp in self.throttled and pump.backlog_chunks < MAX_BACKLOG_CHUNKS:
            self.throttled.discard(tp)
            if self.consumer is not None and tp in self._pumps:
                self.consumer.resume(tp)
        trace_produce(self._tracer, self.name, pump, delivered)

    def lag(self, tp: TopicPartition, pump: PartitionPump) -> int | None:
        """Records on the source after the next one to copy; None before a fetch told."""
        high = self.consumer.highwater(tp) if self.consumer is not None else None
        return None if high is None else max(0, high - pump.next_offset)

    async def watch(self, flush_interval_s: float, stopping: Callable[[], bool]) -> None:
        """Once a second until `stopping()`: catch silent source truncation and flush
        delayed offset syncs."""
        last_flush = time.monotonic()
        while not stopping():
            await asyncio.sleep(1.0)
            if self.consumer is not None:
                await check_truncation(self.consumer, self._pumps)
            if self.books is not None and time.monotonic() - last_flush >= flush_interval_s:
                last_flush = time.monotonic()
                self.books.flush_syncs()
