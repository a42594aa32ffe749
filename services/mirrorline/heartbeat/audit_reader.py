"""The audit's readers: one per flow and side, summarising records per window.

The source reader reads the flow's mirrored source topics on the source cluster; the
target reader reads their remote copies on the target. Neither trusts the other or the
replicator: each computes counts and checksums of what *its* cluster holds. Each batch
becomes one "fold" event to the flow's `AuditApp`, which applies it only if it starts at
the table's position for that partition; the reader then waits until the table shows
the event applied, and re-reads from the table's position if it does not.

Records are fetched as raw batches (`kafka/rawbatches.py`) and decoded by aiokafka's record
code (`kafka/rawrecords.py`), not through the consumer's per-record objects, and each
batch is folded at once (`core.record_audit.fold_records`): the audit must verify records
at least as fast as the replicator copies them, on one core. The consumer serves for
connecting, metadata and log starts; it is never assigned, so it fetches nothing itself.

A side reports itself *caught up* (with the wall-clock time) for every partition whose
position reached the high watermark of the latest fetch. A partition whose remote topic
does not exist on the target (yet) is never caught up: its windows wait, unjudged, rather
than being called MISSING while the replicator may still be creating the topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, TopicPartition

from mirrorline.core import record_audit as audit
from mirrorline.core.filters import TopicFilter, should_replicate_topic
from mirrorline.core.settings import FlowSettings
from mirrorline.heartbeat.audit_app import AuditApp, cadence_s, until_due_s
from mirrorline.heartbeat.retrying import Retrying
from mirrorline.kafka.causes import unreachable
from mirrorline.kafka.metadata import partitions_by_topic
from mirrorline.kafka.rawbatches import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchedPartition,
    RawBatches,
)
from mirrorline.kafka.rawrecords import decode

log = logging.getLogger(__name__)

APPLY_TIMEOUT_S = 15.0
REFRESH_S = 5.0
#: Most bytes one partition's part of a fetch answer holds (max.partition.fetch.bytes).
PARTITION_FETCH_BYTES = 1 << 20
#: Bytes a fetch waits for (fetch.min.bytes) until the report is due: the records of a
#: cadence are read together, whatever their pace.
FETCH_MIN_BYTES = PARTITION_FETCH_BYTES
#: Kafka's OFFSET_OUT_OF_RANGE, and the errors after which Kafka's consumer refreshes its
#: metadata and asks again (UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
#: NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH,
#: UNKNOWN_LEADER_EPOCH, OFFSET_NOT_AVAILABLE).
OFFSET_OUT_OF_RANGE = 1
REFRESH_METADATA = frozenset({3, 5, 6, 9, 56, 74, 75, 78})
#: Pause after a metadata refresh, so a leader election is not asked about in a loop.
REFRESH_PAUSE_S = 0.2


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
        self.policy = flow.replication_policy
        self._filter = TopicFilter(flow.topics, flow.topics_exclude)
        kwargs = dict(consumer_kwargs)
        kwargs.pop("group_id", None)
        kwargs["enable_auto_commit"] = False
        kwargs["auto_offset_reset"] = "earliest"
        self._kwargs = kwargs
        #: Records are fetched raw (`_fetch`), at the isolation level the consumer would use.
        self._isolation = (READ_COMMITTED if kwargs.get("isolation_level") == "read_committed"
                           else READ_UNCOMMITTED)
        self.cluster = flow.source if side == "source" else flow.target
        self.records = 0

    def _remote(self, topic: str) -> str:
        return topic if self.side == "source" else self.flow.remote_topic(topic)

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
        raw = RawBatches(consumer._client)
        readable: dict[str, int] = {}
        #: Next offset expected to hold a record (what was read), and where to fetch next
        #: (past markers and compacted tails too), per partition.
        expected: dict[TopicPartition, int] = {}
        positions: dict[TopicPartition, int] = {}
        #: High watermark of the latest fetch answer per partition.
        highs: dict[TopicPartition, int] = {}
        part_of: dict[TopicPartition, str] = {}
        next_refresh = 0.0
        while True:
            if loop.time() >= next_refresh:
                readable = await asyncio.wait_for(self._discover(consumer), 30)
                tps = {TopicPartition(self._remote(t), p): f"{t}|{p}"
                       for t, n in readable.items() for p in range(n)}
                if set(tps) != set(part_of):
                    part_of = tps
                    # the client's metadata then covers these topics' leaders
                    await consumer._client.set_topics(sorted({tp.topic for tp in tps}))
                    expected = self._seek(part_of)
                    positions = dict(expected)
                    highs = {}
                next_refresh = loop.time() + REFRESH_S
            deltas: dict[TopicPartition, dict[str, list[int]]] = {}
            #: Highest record timestamp read per partition in this batch.
            tops: dict[TopicPartition, int] = {}
            #: Offset gaps met (expected offset, first record after it, its timestamp):
            #: retention's, or merely transaction markers' and compaction's.
            gaps: dict[TopicPartition, list[tuple[int, int, int]]] = {}
            flush_s = cadence_s(window)
            deadline = loop.time() + until_due_s(flush_s)
            if not part_of:  # nothing to read (yet)
                await asyncio.sleep(flush_s)
            # Read until the report is due, idle or not: an idle reader reports once per
            # cadence rather than after every empty fetch. A fetch waits at the broker until
            # the report is due or `FETCH_MIN_BYTES` are there, whichever comes first: what
            # trickles in (a canary a second) is read in one answer at the report, not one
            # fetch per record, and a busy partition still answers at once (the consumer
            # itself never fetches; it connects).
            while part_of and (left := deadline - loop.time()) > 0:
                fetched = await self._fetch(consumer, raw, positions,
                                            max(1, int(left * 1000)))
                stuck: list[TopicPartition] = []
                for tp, part in fetched.items():
                    highs[tp] = part.high_watermark
                    decoded = decode(part.records, positions[tp],
                                     where=f"{tp.topic}-{tp.partition}",
                                     aborted=part.aborted_transactions
                                     if self._isolation == READ_COMMITTED else None)
                    if part.records and decoded.next_offset == positions[tp]:
                        stuck.append(tp)
                    positions[tp] = decoded.next_offset
                    d = deltas.setdefault(tp, {})
                    for records in decoded.batches:
                        at = expected.get(tp, 0)
                        head = records[0]
                        if head.offset > at:
                            gaps.setdefault(tp, []).append((at, head.offset, head.timestamp))
                        if records[-1].offset - head.offset + 1 != len(records):
                            _inner_gaps(records, gaps.setdefault(tp, []))
                        expected[tp] = records[-1].offset + 1
                        folded, top = audit.fold_records(d, records, window, first)
                        if top > tops.get(tp, -1):
                            tops[tp] = top
                        self.records += folded
                if stuck:  # a batch larger than a partition's share of a fetch comes
                    # whole only to the partition asked first (KIP-74)
                    positions = {**{tp: positions[tp] for tp in stuck}, **positions}
            truncated = await _removed(consumer, gaps)
            for tp in part_of:  # past transaction markers that end what was read
                expected[tp] = max(expected.get(tp, 0), positions.get(tp, 0))
            positions.update(await self._flush(part_of, deltas, truncated, expected, highs,
                                               tops))

    async def _fetch(self, consumer: AIOKafkaConsumer, raw: RawBatches,
                     positions: dict[TopicPartition, int], wait_ms: int
                     ) -> dict[TopicPartition, FetchedPartition]:
        """One fetch of every partition, each leader asked at the same time; partitions
        answered with an error are dealt with (see `_fetch_error`) and left out."""
        client: Any = consumer._client
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        leaderless = False
        for tp, offset in positions.items():
            leader = client.cluster.leader_for_partition(tp)
            if leader is None or leader < 0:  # an election: ask again after a refresh
                leaderless = True
                continue
            by_leader.setdefault(int(leader), {})[tp] = offset
        if leaderless:
            await client.force_metadata_update()
        if not by_leader:
            await asyncio.sleep(REFRESH_PAUSE_S)
            return {}
        answers = await asyncio.gather(*(
            raw.fetch(group, max_wait_ms=wait_ms, min_bytes=FETCH_MIN_BYTES,
                      partition_max_bytes=PARTITION_FETCH_BYTES,
                      isolation_level=self._isolation)
            for group in by_leader.values()))
        out: dict[TopicPartition, FetchedPartition] = {}
        for answer in answers:
            for tp, part in answer.items():
                if part.error_code:
                    await self._fetch_error(consumer, tp, part, positions)
                else:
                    out[tp] = part
        return out

    async def _fetch_error(self, consumer: AIOKafkaConsumer, tp: TopicPartition,
                           part: FetchedPartition, positions: dict[TopicPartition, int]
                           ) -> None:
        """As the consumer does: an offset out of range restarts at the log start (the gap
        to it is then seen, and `_removed` tells whether retention made it); a leader or
        partition the metadata got wrong refreshes the metadata; anything else is raised
        (the reader retries from the table's positions)."""
        if part.error_code == OFFSET_OUT_OF_RANGE:
            starts = await consumer.beginning_offsets([tp])
            positions[tp] = int(starts[tp])
        elif part.error_code in REFRESH_METADATA:
            await consumer._client.force_metadata_update()
            await asyncio.sleep(REFRESH_PAUSE_S)
        else:
            part.check(tp)

    def _seek(self, part_of: Mapping[TopicPartition, str]) -> dict[TopicPartition, int]:
        return {tp: self.app.position(self.flow.name, self.side, part) or 0
                for tp, part in part_of.items()}

    async def _flush(self, part_of: Mapping[TopicPartition, str],
                     deltas: Mapping[TopicPartition, dict[str, list[int]]],
                     truncated: Mapping[TopicPartition, int],
                     expected: dict[TopicPartition, int],
                     highs: Mapping[TopicPartition, int],
                     tops: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Send the fold event; the positions to fetch from next when the table did not
        take it (re-read from the table's), else none."""
        now = _now_ms()
        parts: dict[str, dict[str, Any]] = {}
        for tp, part in part_of.items():
            start = self.app.position(self.flow.name, self.side, part)
            position = expected.get(tp, 0)
            high = highs.get(tp)
            caught = now if high is not None and position >= high else -1
            if start is None:
                start = 0
            if position == start and not deltas.get(tp) and tp not in truncated \
                    and (caught < 0 or self.app.settled(self.flow.name, part)):
                continue  # nothing new, or only "still caught up" with nothing to judge
            parts[part] = {"from": start, "to": position, "d": deltas.get(tp, {}),
                           "caught": caught, "truncated": truncated.get(tp, -1),
                           "top": tops.get(tp, -1)}
        if not parts:
            return {}
        await self.app.send({"kind": "fold", "flow": self.flow.name, "side": self.side,
                             "parts": parts})
        if await self._applied(parts):
            return {}
        log.info("audit %s %s: state moved elsewhere; re-reading from the table's "
                 "positions", self.flow.name, self.side)
        expected.update(self._seek(part_of))
        return dict(expected)

    async def _applied(self, parts: Mapping[str, Mapping[str, Any]]) -> bool:
        return await self.app.wait_applied(
            lambda: all(self.app.position(self.flow.name, self.side, part) == data["to"]
                        for part, data in parts.items()), APPLY_TIMEOUT_S)


def _inner_gaps(records: Sequence[Any], into: list[tuple[int, int, int]]) -> None:
    """Offset gaps inside one batch (compaction's), as (expected, found, timestamp)."""
    for before, record in itertools.pairwise(records):
        if record.offset > before.offset + 1:
            into.append((before.offset + 1, record.offset, record.timestamp))


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
