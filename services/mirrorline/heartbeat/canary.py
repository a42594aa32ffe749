"""The canary's two halves: a sender per source cluster, a reader per flow.

The sender keeps the canary topic of its source cluster at no fewer partitions than the
cluster has brokers (so every broker's path is probed) and writes one small record per
partition every `canary.interval.ms`, carrying its send time, its per-partition sequence
number and W3C trace context. The reader of each flow reads the remote canary topic on
the target and feeds the arrivals into the flow's pure `FlowCanary` accounting.

Records older than the service's start are skipped: they were judged (or not) by an
earlier run, and counting them would report the downtime as latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from mirrorline.core.backoff import Backoff
from mirrorline.core.canary import TRACEPARENT, CanaryRecord, FlowCanary
from mirrorline.core.errors import WireFormatError
from mirrorline.kafka.admin import ClusterAdmin, TopicSpec, UnsupportedByBroker
from mirrorline.kafka.metadata import partitions_by_topic

log = logging.getLogger(__name__)

_PROPAGATOR = TraceContextTextMapPropagator()


def _now_ms() -> int:
    return int(time.time() * 1000)


class CanarySender:
    """Sends the canary of one source cluster and tells every flow from it what it sent."""

    def __init__(self, alias: str, topic: str, interval_ms: int, *,
                 producer_kwargs: Mapping[str, Any], admin_kwargs: Mapping[str, Any],
                 tracer: trace.Tracer, replication_factor: int = -1) -> None:
        self.alias = alias
        self.topic = topic
        self.interval_ms = interval_ms
        self.replication_factor = replication_factor
        self._producer_kwargs = dict(producer_kwargs)
        self._admin_kwargs = dict(admin_kwargs)
        self._tracer = tracer
        self.flows: list[FlowCanary] = []
        self.session = _now_ms()
        self.partitions = 0
        self.error: str | None = None
        self._sequence: dict[int, int] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"canary of {self.alias}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _prepare(self) -> int:
        admin = ClusterAdmin(self.alias, self._admin_kwargs)
        await asyncio.wait_for(admin.start(), 15)
        try:
            brokers = len((await admin.describe_cluster()).get("brokers", [])) or 1
            existing = (await admin.topic_partitions([self.topic])).get(self.topic)
            if existing is None:
                await admin.ensure_topic(TopicSpec(self.topic, brokers, self.replication_factor,
                                                   {"retention.ms": str(24 * 3600 * 1000)}))
                return brokers
            if existing < brokers:
                try:
                    await admin.create_partitions(self.topic, brokers)
                    return brokers
                except (UnsupportedByBroker, RuntimeError) as exc:
                    log.warning("canary %s: %d partitions for %d brokers, cannot grow: %s",
                                self.topic, existing, brokers, exc)
            return existing
        finally:
            await admin.close()

    async def _run(self) -> None:
        backoff, attempt = Backoff(maximum=10.0), 0
        while True:
            producer: AIOKafkaProducer | None = None
            try:
                self.partitions = await self._prepare()
                producer = AIOKafkaProducer(**self._producer_kwargs)
                await asyncio.wait_for(producer.start(), 15)
                self._set_error(None)
                attempt = 0
                while True:
                    await self._send_round(producer)
                    await asyncio.sleep(self.interval_ms / 1000)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._set_error(f"source cluster {self.alias!r} unreachable for the canary: "
                                f"{exc!r}")
                await asyncio.sleep(backoff.delay(attempt))
                attempt += 1
            finally:
                if producer is not None:
                    with contextlib.suppress(Exception):
                        await producer.stop()

    def _set_error(self, error: str | None) -> None:
        if error is not None and error != self.error:
            log.warning("%s; retrying", error)
        self.error = error

    async def _send_round(self, producer: AIOKafkaProducer) -> None:
        futures = []
        records = []
        for partition in range(self.partitions):
            sequence = self._sequence.get(partition, 0) + 1
            self._sequence[partition] = sequence
            record = CanaryRecord(self.session, partition, sequence, _now_ms())
            with self._tracer.start_as_current_span(
                    f"{self.topic} publish", kind=trace.SpanKind.PRODUCER,
                    attributes={"messaging.system": "kafka",
                                "messaging.destination.name": self.topic,
                                "messaging.destination.partition.id": str(partition),
                                "messaging.operation.type": "publish"}):
                carrier: dict[str, str] = {}
                _PROPAGATOR.inject(carrier)
            headers = [(k, v.encode()) for k, v in carrier.items()] or \
                [(TRACEPARENT, b"00-00000000000000000000000000000000-0000000000000000-00")]
            futures.append(await producer.send(self.topic, record.encode(),
                                               key=self.alias.encode(), partition=partition,
                                               timestamp_ms=record.sent_ms, headers=headers))
            records.append(record)
        await asyncio.gather(*futures)
        for record in records:
            for flow in self.flows:
                flow.sent(record)


class CanaryReader:
    """Reads one flow's remote canary on the target into its `FlowCanary`."""

    def __init__(self, flow_name: str, target: str, topic: str, canary: FlowCanary, *,
                 consumer_kwargs: Mapping[str, Any], since_ms: int) -> None:
        self.flow_name = flow_name
        self.target = target
        self.topic = topic
        self.canary = canary
        self.since_ms = since_ms
        kwargs = dict(consumer_kwargs)
        kwargs.pop("group_id", None)
        kwargs["enable_auto_commit"] = False
        kwargs.setdefault("fetch_max_wait_ms", 100)
        self._kwargs = kwargs
        self.partitions = 0
        self.error: str | None = None
        self._reported: set[tuple[int, int]] = set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"canary reader {self.flow_name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        backoff, attempt = Backoff(maximum=10.0), 0
        while True:
            consumer = AIOKafkaConsumer(**self._kwargs)
            try:
                await asyncio.wait_for(consumer.start(), 15)
                self.error = self.canary.unreachable = None
                attempt = 0
                await self._follow(consumer)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = f"target cluster {self.target!r} unreachable: {exc!r}"
                if reason != self.error:
                    log.warning("canary %s: %s; retrying", self.flow_name, reason)
                self.error = self.canary.unreachable = reason
                await asyncio.sleep(backoff.delay(attempt))
                attempt += 1
            finally:
                with contextlib.suppress(Exception):
                    await consumer.stop()

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        assigned: set[TopicPartition] = set()
        next_check = 0.0
        loop = asyncio.get_running_loop()
        while True:
            if loop.time() >= next_check:
                found = await asyncio.wait_for(partitions_by_topic(consumer, [self.topic]), 15)
                tps = {TopicPartition(self.topic, p) for p in found.get(self.topic, [])}
                if tps - assigned:
                    await self._assign(consumer, assigned, tps)
                    assigned = tps
                    self.partitions = len(tps)
                next_check = loop.time() + 2.0
            if not assigned:
                await asyncio.sleep(0.5)
                continue
            batches = await consumer.getmany(timeout_ms=200)
            arrival = _now_ms()
            for records in batches.values():
                for record in records:
                    self._take(record, arrival)

    async def _assign(self, consumer: AIOKafkaConsumer, old: set[TopicPartition],
                      tps: set[TopicPartition]) -> None:
        positions = {tp: await consumer.position(tp) for tp in old}
        consumer.assign(sorted(tps))
        for tp in tps:
            if tp in positions:
                consumer.seek(tp, positions[tp])
        new = [tp for tp in tps if tp not in positions]
        if new:
            # offsets_for_times may answer early on some brokers; records before
            # `since_ms` are skipped by `_take` in any case.
            found = await consumer.offsets_for_times({tp: self.since_ms for tp in new})
            for tp in new:
                at = found.get(tp)
                if at is None:
                    await consumer.seek_to_end(tp)
                else:
                    consumer.seek(tp, at.offset)

    def _take(self, record: Any, arrival_ms: int) -> None:
        try:
            canary = CanaryRecord.decode(record.value)
        except WireFormatError as exc:
            where = (record.partition, record.offset)
            if where not in self._reported:
                self._reported.add(where)
                log.warning("canary %s: skipping malformed record at topic %s partition %d "
                            "offset %d: %s", self.flow_name, record.topic, record.partition,
                            record.offset, exc)
            return
        if canary.sent_ms < self.since_ms:
            return
        anomaly = self.canary.arrived(canary, arrival_ms)
        if anomaly:
            log.warning("canary %s: %s", self.flow_name, anomaly)
