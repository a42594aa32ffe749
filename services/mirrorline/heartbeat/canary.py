"""The canary's two halves: a sender per source cluster, a reader per flow.

The sender keeps the canary topic of its source cluster at no fewer partitions than the
cluster has brokers (so every broker's path is probed) and writes one small record per
partition every `canary.interval.ms`, carrying its send time, its per-partition sequence
number and W3C trace context. The reader of each flow reads the remote canary topic on
the target, takes each canary's arrival time as it is read (and tells the flow's
`FlowCanary` it is no longer overdue), and hands the arrivals, once per audit cadence
(`audit_app.cadence_s`), as one "canaries" event for all its partitions to the target's
faust app, whose agent folds them into the canary table (`core.canary.fold_arrival`);
the flow's `FlowCanary` judges latency, losses and repeats from that table. One event
per cadence rather than per canary or per partition: each is a produce, a fetch and a
changelog write through the app, and at one a second they were a large part of what an
idle service spent. Like
the audit's readers, a reader resumes from the offset the table records and re-reads
from there whenever its event was not applied, so a restart neither loses nor
double-counts an arrival.

A canary sent before its partition *opened* -- before the reader first read a canary
there -- gives no latency sample (counting it would report the mirror's start, or the
reader's downtime, as latency) and is never overdue; its sequence still counts for a
session the table already knows. See `core.canary`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from mirrorline.core.canary import TRACEPARENT, CanaryRecord, FlowCanary
from mirrorline.core.errors import WireFormatError
from mirrorline.heartbeat.audit_app import AuditApp, cadence_s, until_due_s
from mirrorline.heartbeat.retrying import Retrying
from mirrorline.kafka.admin import ClusterAdmin, TopicSpec, UnsupportedByBroker
from mirrorline.kafka.causes import unreachable
from mirrorline.kafka.metadata import partitions_by_topic
from mirrorline.kafka.reader import TAIL_ROUTINE_MS

log = logging.getLogger(__name__)

_PROPAGATOR = TraceContextTextMapPropagator()

#: Longest wait for the app's agent to apply a reader's event.
APPLY_TIMEOUT_S = 15.0
#: How long a canary reader's fetch waits at the broker for a canary (a `fetch.max.wait.ms`
#: set for the target's consumers in the file wins).
CANARY_FETCH_WAIT_MS = 2000
#: Seconds between a canary reader's looks for new partitions of its remote canary (the
#: source cluster gained a broker), once it reads some; every 2 s until then.
PARTITIONS_EVERY_S = 10.0


def _now_ms() -> int:
    return int(time.time() * 1000)


class CanarySender(Retrying):
    """Sends the canary of one source cluster and tells every flow from it what it sent."""

    def __init__(self, alias: str, topic: str, interval_ms: int, *,
                 producer_kwargs: Mapping[str, Any], admin_kwargs: Mapping[str, Any],
                 tracer: trace.Tracer, replication_factor: int = -1) -> None:
        super().__init__(f"canary of {alias}")
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
        self._sequence: dict[int, int] = {}

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

    def _describe(self, exc: Exception) -> tuple[str, str]:
        reason = unreachable(self.alias, exc, self._producer_kwargs.get("bootstrap_servers"),
                             role="source", purpose="for the canary",
                             protocol=self._producer_kwargs.get("security_protocol"))
        return reason, reason

    async def _session(self) -> None:
        producer: AIOKafkaProducer | None = None
        try:
            self.partitions = await self._prepare()
            producer = AIOKafkaProducer(**self._producer_kwargs)
            await asyncio.wait_for(producer.start(), 15)
            self._ready()
            while True:
                await self._send_round(producer)
                await asyncio.sleep(self.interval_ms / 1000)
        finally:
            if producer is not None:
                with contextlib.suppress(Exception):
                    await producer.stop()

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


class CanaryReader(Retrying):
    """Reads one flow's remote canary on the target into the canary table of the target's
    app (`app()` gives it once started), which the flow's `FlowCanary` judges from."""

    def __init__(self, flow_name: str, target: str, topic: str, canary: FlowCanary, *,
                 consumer_kwargs: Mapping[str, Any], since_ms: int,
                 app: Callable[[], AuditApp | None], tracer: trace.Tracer) -> None:
        super().__init__(f"canary reader {flow_name}")
        self._tracer = tracer
        self.flow_name = flow_name
        self.target = target
        self.topic = topic
        self.canary = canary
        self.since_ms = since_ms
        self._app = app
        kwargs = dict(consumer_kwargs)
        kwargs.pop("group_id", None)
        kwargs["enable_auto_commit"] = False
        # A fetch answers as soon as a canary comes, so the wait costs no arrival time; at
        # 500 ms (the tails' wait) an idle fetch went out between every two canaries.
        kwargs.setdefault("fetch_max_wait_ms", CANARY_FETCH_WAIT_MS)
        kwargs.setdefault("consumer_timeout_ms", TAIL_ROUTINE_MS)
        self._kwargs = kwargs
        self.partitions = 0
        self._reported: set[tuple[int, int]] = set()

    def _describe(self, exc: Exception) -> tuple[str, str]:
        reason = unreachable(self.target, exc, self._kwargs.get("bootstrap_servers"),
                             role="target", protocol=self._kwargs.get("security_protocol"))
        return reason, f"canary {self.flow_name}: {reason}"

    def _set_error(self, error: str | None) -> None:
        self.error = self.canary.unreachable = error

    async def _session(self) -> None:
        consumer = AIOKafkaConsumer(**self._kwargs)
        try:
            await asyncio.wait_for(consumer.start(), 15)
            self._ready()
            while True:  # the state app is starting (or its cluster is down)
                app = self._app()
                if app is not None and app.started:
                    break
                await asyncio.sleep(0.2)
            await self._follow(consumer, app)
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()

    async def _follow(self, consumer: AIOKafkaConsumer, app: AuditApp) -> None:
        assigned: set[TopicPartition] = set()
        next_check = 0.0
        loop = asyncio.get_running_loop()
        #: Read and not reported yet, per partition: (record, its arrival ms), in order.
        unreported: dict[TopicPartition, list[tuple[Any, int]]] = {}
        report_at: float | None = None
        while True:
            if loop.time() >= next_check:
                found = await asyncio.wait_for(partitions_by_topic(consumer, [self.topic]), 15)
                tps = {TopicPartition(self.topic, p) for p in found.get(self.topic, [])}
                if tps - assigned:
                    await self._assign(consumer, app, assigned, tps)
                    assigned = tps
                    self.partitions = len(tps)
                next_check = loop.time() + (PARTITIONS_EVERY_S if assigned else 2.0)
            if not assigned:
                await asyncio.sleep(0.5)
                continue
            # Records are returned the moment they come; the timeout only paces an idle
            # loop (at 200 ms it went round five times a second).
            wait_s = 1.0 if report_at is None else min(1.0, report_at - loop.time())
            batches = await consumer.getmany(timeout_ms=max(0, int(wait_s * 1000)))
            arrival = _now_ms()
            for tp, records in batches.items():
                if records:
                    self._arrived(tp.partition, records, arrival)
                    unreported.setdefault(tp, []).extend((r, arrival) for r in records)
            if unreported and report_at is None:
                report_at = loop.time() + until_due_s(cadence_s(self.canary.window_ms))
            if report_at is not None and loop.time() >= report_at:
                await self._report(consumer, app, unreported)
                unreported.clear()
                report_at = None

    def _arrived(self, partition: int, records: list[Any], arrival_ms: int) -> None:
        """Canaries read at `arrival_ms`: they and every earlier one of the partition are
        not overdue from now on (their latency counts once the table has them)."""
        self.canary.open(partition, arrival_ms)
        for record in records:
            canary = self._decode(record)
            if canary is not None:
                self.canary.seen(canary)

    async def _assign(self, consumer: AIOKafkaConsumer, app: AuditApp,
                      old: set[TopicPartition], tps: set[TopicPartition]) -> None:
        positions = {tp: await consumer.position(tp) for tp in old}
        consumer.assign(sorted(tps))
        for tp in tps:
            if tp in positions:
                consumer.seek(tp, positions[tp])
        new = [tp for tp in tps if tp not in positions]
        for tp in list(new):
            state = app.canary_state(self.flow_name, tp.partition)
            if state is not None:  # resume where the table stands
                consumer.seek(tp, int(state["next"]))
                new.remove(tp)
        if new:
            # offsets_for_times may answer early on some brokers; records sent before
            # `since_ms` of a session not seen yet are ignored by the fold in any case.
            found = await consumer.offsets_for_times({tp: self.since_ms for tp in new})
            for tp in new:
                at = found.get(tp)
                if at is None:
                    await consumer.seek_to_end(tp)
                else:
                    consumer.seek(tp, at.offset)

    async def _report(self, consumer: AIOKafkaConsumer, app: AuditApp,
                      unreported: Mapping[TopicPartition, list[tuple[Any, int]]]) -> None:
        """Report what every partition read since the last report (record, arrival ms) as
        one event, each canary with its own arrival time. One event for the partitions
        together, not one each: each event is a produce, a fetch by the app and a
        changelog write (a canary topic has a partition per broker of its source cluster)."""
        parts: dict[str, dict[str, Any]] = {}
        starts: dict[TopicPartition, int] = {}
        ends: dict[int, int] = {}
        decoded: dict[TopicPartition, list[tuple[Any, CanaryRecord, int]]] = {}
        for tp, arrivals in unreported.items():
            if not arrivals:
                continue
            records = [r for r, _at in arrivals]
            state = app.canary_state(self.flow_name, tp.partition)
            start = records[0].offset if state is None else int(state["next"])
            if records[0].offset != start:  # not where the table stands: re-read from there
                consumer.seek(tp, start)
                continue
            # Canaries sent before the partition opened (its first arrival here) are the
            # backlog of a mirror that was starting or stopped: no latency samples.
            opened = self.canary.open(tp.partition, arrivals[0][1])
            decoded[tp] = [(r, c, at) for r, c, at in
                           ((r, self._decode(r), at) for r, at in arrivals) if c is not None]
            starts[tp], ends[tp.partition] = start, records[-1].offset + 1
            parts[str(tp.partition)] = {
                "from": start, "to": ends[tp.partition], "at": arrivals[-1][1],
                "since": opened,
                "records": [[c.session, c.sequence, c.sent_ms, at]
                            for _r, c, at in decoded[tp]]}
        if not parts:
            return
        await app.send({"kind": "canaries", "flow": self.flow_name,
                        "window": self.canary.window_ms, "parts": parts})
        await self._applied(app, ends)
        for tp, start in starts.items():
            state = app.canary_state(self.flow_name, tp.partition)
            if state is None or int(state["next"]) != ends[tp.partition]:
                log.info("canary %s: state of partition %d moved elsewhere; re-reading from "
                         "the table's position", self.flow_name, tp.partition)
                consumer.seek(tp, start if state is None else int(state["next"]))
                continue
            for record, canary, at in decoded[tp]:
                self._arrival_span(record, canary, at)

    def _arrival_span(self, record: Any, canary: CanaryRecord, arrival_ms: int) -> None:
        """The canary's arrival, in the trace its sender started (the replicator copies
        the record's `traceparent`, and links its batch span to it): one trace shows the
        canary from produce through replication to here."""
        carrier = {k: v.decode("ascii", "replace") for k, v in (record.headers or ())
                   if k == TRACEPARENT and v is not None}
        span = self._tracer.start_span(
            f"{self.topic} process", context=_PROPAGATOR.extract(carrier),
            kind=trace.SpanKind.CONSUMER, start_time=arrival_ms * 1_000_000,
            attributes={"messaging.system": "kafka",
                        "messaging.destination.name": self.topic,
                        "messaging.destination.partition.id": str(record.partition),
                        "messaging.kafka.offset": record.offset,
                        "messaging.operation.type": "process",
                        "mirrorline.flow": self.flow_name,
                        "mirrorline.canary.sequence": canary.sequence,
                        "mirrorline.canary.latency_ms": max(0, arrival_ms - canary.sent_ms)})
        span.end()

    async def _applied(self, app: AuditApp, ends: Mapping[int, int]) -> bool:
        """Whether the table reached `ends` (partition -> next offset) in time."""
        def done() -> bool:
            for partition, to in ends.items():
                state = app.canary_state(self.flow_name, partition)
                if state is None or int(state["next"]) != to:
                    return False
            return True

        return await app.wait_applied(done, APPLY_TIMEOUT_S)

    def _decode(self, record: Any) -> CanaryRecord | None:
        """The canary `record` holds; None (reported once) if it is not one."""
        try:
            return CanaryRecord.decode(record.value)
        except WireFormatError as exc:
            where = (record.partition, record.offset)
            if where not in self._reported:
                self._reported.add(where)
                log.warning("canary %s: skipping malformed record at topic %s partition %d "
                            "offset %d: %s", self.flow_name, record.topic, record.partition,
                            record.offset, exc)
            return None
