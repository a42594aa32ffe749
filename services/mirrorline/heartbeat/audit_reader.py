"""The audit's readers: one per flow and side, summarising records per window.

The source reader reads the flow's mirrored source topics on the source cluster; the
target reader reads their remote copies on the target. Neither trusts the other or the
replicator: each computes counts and checksums of what *its* cluster holds. Each batch
becomes one "fold" event to the flow's `AuditApp`, which applies it only if it starts at
the table's position for that partition; the reader then waits until the table shows
the event applied, and re-reads from the table's position if it does not.

A side reports itself *caught up* (with the wall-clock time) for every partition whose
position reached the high watermark of the latest fetch. A partition whose remote topic
does not exist on the target (yet) is never caught up: its windows wait, unjudged, rather
than being called MISSING while the replicator may still be creating the topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, TopicPartition

from mirrorline.core import record_audit as audit
from mirrorline.core.filters import TopicFilter, should_replicate_topic
from mirrorline.core.policy import make_policy
from mirrorline.core.settings import FlowSettings
from mirrorline.heartbeat.audit_app import AuditApp, cadence_s
from mirrorline.heartbeat.retrying import Retrying
from mirrorline.kafka.causes import unreachable
from mirrorline.kafka.metadata import partitions_by_topic
from mirrorline.kafka.reader import TAIL_ROUTINE_MS

log = logging.getLogger(__name__)

APPLY_TIMEOUT_S = 15.0
REFRESH_S = 5.0


def _now_ms() -> int:
    return int(time.time() * 1000)


class FlowTopics:
    """The flow's audited source topics and partition counts, found by the source reader."""

    def __init__(self) -> None:
        self.partitions: dict[str, int] = {}


class AuditReader(Retrying):
    def __init__(self, flow: FlowSettings, side: Literal["source", "target"], app: AuditApp,
                 topics: FlowTopics, consumer_kwargs: Mapping[str, Any]) -> None:
        super().__init__(f"audit {side} {flow.name}")
        self.flow = flow
        self.side = side
        self.app = app
        self.topics = topics
        self.policy = make_policy(flow.policy, flow.source)
        self._filter = TopicFilter(flow.topics, flow.topics_exclude)
        kwargs = dict(consumer_kwargs)
        kwargs.pop("group_id", None)
        kwargs["enable_auto_commit"] = False
        kwargs["auto_offset_reset"] = "earliest"
        # A fetch answers as soon as records come, and a reader reports once per cadence:
        # an idle fetch need not return sooner (at 500 ms, the two readers of an idle flow
        # with minute windows fetched four times a second instead of twice in 3 s).
        kwargs.setdefault("fetch_max_wait_ms", int(cadence_s(flow.audit.window_ms) * 1000))
        kwargs.setdefault("consumer_timeout_ms", TAIL_ROUTINE_MS)
        self._kwargs = kwargs
        self.cluster = flow.source if side == "source" else flow.target
        self.records = 0

    def _remote(self, topic: str) -> str:
        return topic if self.side == "source" else self.policy.format_remote_topic(
            self.flow.source, topic)

    def _describe(self, exc: Exception) -> tuple[str, str]:
        reason = unreachable(self.cluster, exc, self._kwargs.get("bootstrap_servers"),
                             role=self.side, protocol=self._kwargs.get("security_protocol"))
        return reason, f"audit {self.flow.name}: {reason}"

    async def _session(self) -> None:
        consumer = AIOKafkaConsumer(**self._kwargs)
        try:
            await asyncio.wait_for(consumer.start(), 15)
            self._ready()
            await self._read(consumer)
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()

    async def _discover(self, consumer: AIOKafkaConsumer) -> dict[str, int]:
        """Source topic -> partitions this side reads (target: those that exist there)."""
        if self.side == "source":
            cluster = await consumer._client.fetch_all_metadata()
            found = {t: len(cluster.partitions_for_topic(t) or ())
                     for t in cluster.topics()
                     if not self.policy.is_heartbeats_topic(t) and should_replicate_topic(
                         t, policy=self.policy, topic_filter=self._filter,
                         target_alias=self.flow.target,
                         heartbeats_replication_enabled=False,
                         canary_enabled=self.flow.canary.enabled)}
            self.topics.partitions = {t: n for t, n in found.items() if n}
            return dict(self.topics.partitions)
        remote = await partitions_by_topic(consumer, [self._remote(t)
                                                      for t in self.topics.partitions])
        return {t: len(remote.get(self._remote(t), [])) for t in self.topics.partitions}

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        flow = self.flow.name
        while True:  # the app's agent records the flow's first window shortly after start
            first = self.app.first_window(flow)
            if first is not None:
                break
            await asyncio.sleep(0.2)
        window = self.flow.audit.window_ms
        loop = asyncio.get_running_loop()
        readable: dict[str, int] = {}
        expected: dict[TopicPartition, int] = {}
        part_of: dict[TopicPartition, str] = {}
        next_refresh = 0.0
        while True:
            if loop.time() >= next_refresh:
                readable = await asyncio.wait_for(self._discover(consumer), 30)
                tps = {TopicPartition(self._remote(t), p): f"{t}|{p}"
                       for t, n in readable.items() for p in range(n)}
                if set(tps) != set(part_of):
                    part_of = tps
                    consumer.assign(sorted(tps))
                    expected = self._seek(consumer, part_of)
                next_refresh = loop.time() + REFRESH_S
            deltas: dict[TopicPartition, dict[str, list[int]]] = {}
            #: Highest record timestamp read per partition in this batch.
            tops: dict[TopicPartition, int] = {}
            #: Offset gaps met (expected offset, first record after it, its timestamp):
            #: retention's, or merely transaction markers' and compaction's.
            gaps: dict[TopicPartition, list[tuple[int, int, int]]] = {}
            flush_s = cadence_s(window)
            deadline = loop.time() + flush_s
            if not part_of:  # nothing to read (yet): a fetch would wait for an assignment
                await asyncio.sleep(flush_s)
            # Read until the report is due, idle or not: records are taken as they come (a
            # fetch answers as soon as there are any), and an idle reader reports once per
            # cadence rather than after every empty fetch.
            while part_of and (left := deadline - loop.time()) > 0:
                batches = await consumer.getmany(timeout_ms=max(1, int(left * 1000)),
                                                 max_records=20000)
                for tp, records in batches.items():
                    d = deltas.setdefault(tp, {})
                    for record in records:
                        if record.offset > expected.get(tp, 0):
                            gaps.setdefault(tp, []).append(
                                (expected.get(tp, 0), record.offset, record.timestamp))
                        expected[tp] = record.offset + 1
                        if record.timestamp < first:
                            continue
                        if record.timestamp > tops.get(tp, -1):
                            tops[tp] = record.timestamp
                        audit.accumulate(d, record.timestamp, audit.record_digest(
                            record.key, record.value, record.headers, record.timestamp),
                            window)
                        self.records += 1
            truncated = await _removed(consumer, gaps)
            for tp in part_of:  # past transaction markers that end what was read
                expected[tp] = max(expected.get(tp, 0), await consumer.position(tp))
            await self._flush(consumer, part_of, deltas, truncated, expected, tops)

    def _seek(self, consumer: AIOKafkaConsumer,
              part_of: Mapping[TopicPartition, str]) -> dict[TopicPartition, int]:
        expected: dict[TopicPartition, int] = {}
        for tp, part in part_of.items():
            position = self.app.position(self.flow.name, self.side, part) or 0
            consumer.seek(tp, position)
            expected[tp] = position
        return expected

    async def _flush(self, consumer: AIOKafkaConsumer, part_of: Mapping[TopicPartition, str],
                     deltas: Mapping[TopicPartition, dict[str, list[int]]],
                     truncated: Mapping[TopicPartition, int],
                     expected: dict[TopicPartition, int],
                     tops: Mapping[TopicPartition, int]) -> None:
        now = _now_ms()
        parts: dict[str, dict[str, Any]] = {}
        for tp, part in part_of.items():
            start = self.app.position(self.flow.name, self.side, part)
            position = expected.get(tp, 0)
            high = consumer.highwater(tp)
            caught = now if high is not None and position >= high else -1
            if start is None:
                start = 0
            if position == start and not deltas.get(tp) and caught < 0:
                continue
            parts[part] = {"from": start, "to": position, "d": deltas.get(tp, {}),
                           "caught": caught, "truncated": truncated.get(tp, -1),
                           "top": tops.get(tp, -1)}
        if not parts:
            return
        await self.app.send({"kind": "fold", "flow": self.flow.name, "side": self.side,
                             "parts": parts})
        if not await self._applied(parts):
            log.info("audit %s %s: state moved elsewhere; re-reading from the table's "
                     "positions", self.flow.name, self.side)
            expected.update(self._seek(consumer, part_of))

    async def _applied(self, parts: Mapping[str, Mapping[str, Any]]) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + APPLY_TIMEOUT_S
        while loop.time() < deadline:
            done = all(self.app.position(self.flow.name, self.side, part) == data["to"]
                       for part, data in parts.items())
            if done:
                return True
            await asyncio.sleep(0.02)
        return False


async def _removed(consumer: AIOKafkaConsumer,
                   gaps: Mapping[TopicPartition, Sequence[tuple[int, int, int]]]
                   ) -> dict[TopicPartition, int]:
    """Partition -> timestamp of the first record after records that retention (or
    DeleteRecords) removed before they were read, among the offset `gaps` met. A gap is
    such a removal only if the partition's log start now lies beyond its expected offset:
    transaction markers and compaction leave gaps too, with nothing lost to the audit."""
    if not gaps:
        return {}
    starts = await consumer.beginning_offsets(list(gaps))
    removed: dict[TopicPartition, int] = {}
    for tp, seen in gaps.items():
        lost = [timestamp for expected, _, timestamp in seen if expected < starts[tp]]
        if lost:
            removed[tp] = max(lost)
    return removed
