"""The audit's readers: one per flow and side, summarising records per window.

The source reader reads the flow's mirrored source topics on the source cluster; the
target reader reads their remote copies on the target. Neither trusts the other or the
replicator: each computes counts and checksums of what *its* cluster holds. Each batch
becomes one "fold" event to the flow's `AuditApp`, which applies it only if it starts at
the table's position for that partition; the reader then waits until the table shows
the event applied, and re-reads from the table's position if it does not.

Records are fetched as raw batches (`kafka/rawbatches.py`) and handed to the side's
`SideFolder` (`audit_fold.py`): a batch the batch path copied verbatim is paired with its
source batch and verified whole, without decoding (`core.batch_audit`; the flow's two
readers share the `Pairing` in `FlowTopics`); anything else is decoded by aiokafka's
record code (`kafka/rawrecords.py`) and folded a batch at once
(`core.record_audit.fold_records`): the audit must verify records at least as fast as
the replicator copies them, per core. The consumer serves for connecting, metadata and
log starts; it is never assigned, so it fetches nothing itself.

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

from mirrorline.core.batch_audit import Pairing, other_side
from mirrorline.core.filters import TopicFilter, should_replicate_topic
from mirrorline.core.settings import FlowSettings
from mirrorline.heartbeat.audit_app import AuditApp, cadence_s, until_due_s
from mirrorline.heartbeat.audit_fold import Cycle, SideFolder
from mirrorline.heartbeat.retrying import Retrying
from mirrorline.kafka.causes import unreachable
from mirrorline.kafka.metadata import partitions_by_topic
from mirrorline.kafka.rawbatches import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchedPartition,
    RawBatches,
)

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
    """The flow's audited source topics and partition counts, found by the source reader,
    and the source batches it holds for the target reader to pair."""

    def __init__(self) -> None:
        self.partitions: dict[str, int] = {}
        self.pairing = Pairing()


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
        self.folder: SideFolder | None = None

    @property
    def records(self) -> int:
        """Records verified since start (whole or one by one)."""
        return 0 if self.folder is None else self.folder.records

    @property
    def whole_batches(self) -> int:
        """Batches verified whole: paired with the other side's, not decoded."""
        return 0 if self.folder is None else self.folder.whole_batches

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
        other = other_side(self.side)
        folder = SideFolder(
            self.side, self.topics.pairing, window_ms=window, first=first,
            hold_ms=self.flow.audit.grace_ms,
            other_tokens=lambda part: self.app.tokens(flow, other, part),
            own_tokens=lambda part: self.app.tokens(flow, self.side, part))
        self.folder = folder
        try:
            await self._read_with(consumer, folder, first, window)
        finally:
            folder.forget()

    async def _read_with(self, consumer: AIOKafkaConsumer, folder: SideFolder, first: int,
                         window: int) -> None:
        loop = asyncio.get_running_loop()
        raw = RawBatches(consumer._client)
        readable: dict[str, int] = {}
        #: Next offset expected to hold a record (what was folded), and where to fetch next
        #: (past markers and compacted tails too), per partition.
        expected: dict[TopicPartition, int] = {}
        positions: dict[TopicPartition, int] = {}
        #: High watermark of the latest fetch answer per partition.
        highs: dict[TopicPartition, int] = {}
        #: (position, wall-clock ms) of fetches that reached the high watermark, for
        #: partitions with batches read and not folded yet.
        reached: dict[TopicPartition, list[tuple[int, int]]] = {}
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
                    folder.forget()
                    expected = self._seek(part_of)
                    positions = dict(expected)
                    highs = {}
                    reached = {}
                next_refresh = loop.time() + REFRESH_S
            cycles: dict[TopicPartition, Cycle] = {}
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
                now = _now_ms()
                stuck: list[TopicPartition] = []
                for tp, part in fetched.items():
                    highs[tp] = part.high_watermark
                    name = part_of[tp]
                    at = folder.read(name, part.records, positions[tp],
                                     where=f"{tp.topic}-{tp.partition}",
                                     aborted=part.aborted_transactions
                                     if self._isolation == READ_COMMITTED else None,
                                     now_ms=now, cycle=cycles.setdefault(tp, Cycle()))
                    if part.records and at == positions[tp]:
                        stuck.append(tp)
                    positions[tp] = at
                    if at >= part.high_watermark:
                        reached.setdefault(tp, []).append((at, now))
                for tp, name in part_of.items():
                    if folder.queues.get(name):
                        expected[tp] = folder.drain(name, expected.get(tp, 0), now,
                                                    cycles.setdefault(tp, Cycle()),
                                                    where=f"{tp.topic}-{tp.partition}")
                if stuck:  # a batch larger than a partition's share of a fetch comes
                    # whole only to the partition asked first (KIP-74)
                    positions = {**{tp: positions[tp] for tp in stuck}, **positions}
            now = _now_ms()
            caught: dict[TopicPartition, int] = {}
            for tp, name in part_of.items():
                if folder.queues.get(name):
                    expected[tp] = folder.drain(name, expected.get(tp, 0), now,
                                                cycles.setdefault(tp, Cycle()),
                                                where=f"{tp.topic}-{tp.partition}")
                frontier = folder.frontier(name)
                seen = reached.get(tp, [])
                if frontier is None:
                    # past transaction markers that end what was read
                    expected[tp] = max(expected.get(tp, 0), positions.get(tp, 0))
                    high = highs.get(tp)
                    caught[tp] = now if high is not None and expected[tp] >= high else -1
                    reached.pop(tp, None)
                    continue
                # Batches are held: caught up as of the last fetch whose records are all
                # folded.
                caught[tp] = -1
                while seen and seen[0][0] <= frontier:
                    caught[tp] = seen.pop(0)[1]
            gaps = {tp: c.gaps for tp, c in cycles.items() if c.gaps}
            truncated = await _removed(consumer, gaps)
            positions.update(await self._flush(part_of, cycles, truncated, expected,
                                               caught))

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
                     cycles: Mapping[TopicPartition, Cycle],
                     truncated: Mapping[TopicPartition, int],
                     expected: dict[TopicPartition, int],
                     caught_at: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Send the fold event; the positions to fetch from next when the table did not
        take it (re-read from the table's), else none."""
        parts: dict[str, dict[str, Any]] = {}
        empty = Cycle()
        for tp, part in part_of.items():
            start = self.app.position(self.flow.name, self.side, part)
            position = expected.get(tp, 0)
            caught = caught_at.get(tp, -1)
            cycle = cycles.get(tp, empty)
            if start is None:
                start = 0
            if position == start and not cycle.deltas and tp not in truncated \
                    and (caught < 0 or self.app.settled(self.flow.name, part)):
                continue  # nothing new, or only "still caught up" with nothing to judge
            parts[part] = {"from": start, "to": position, "d": cycle.deltas,
                           "caught": caught, "truncated": truncated.get(tp, -1),
                           "top": cycle.top}
            if cycle.tokens:
                parts[part]["b"] = cycle.tokens
        if not parts:
            return {}
        await self.app.send({"kind": "fold", "flow": self.flow.name, "side": self.side,
                             "parts": parts})
        if await self._applied(parts):
            return {}
        log.info("audit %s %s: state moved elsewhere; re-reading from the table's "
                 "positions", self.flow.name, self.side)
        if self.folder is not None:
            self.folder.forget()
        expected.clear()
        expected.update(self._seek(part_of))
        return dict(expected)

    async def _applied(self, parts: Mapping[str, Mapping[str, Any]]) -> bool:
        return await self.app.wait_applied(
            lambda: all(self.app.position(self.flow.name, self.side, part) == data["to"]
                        for part, data in parts.items()), APPLY_TIMEOUT_S)


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
