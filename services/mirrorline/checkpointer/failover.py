"""Failover of consumer groups for one flow: translate, plan, commit -- the I/O around
:mod:`mirrorline.core.failover` and :mod:`mirrorline.core.translation`.

A group's position comes from the source cluster when it answers (its committed offsets,
read now) and otherwise from the group's last checkpoints on the target -- the unplanned
case, where the source is gone. Every answer says how it was obtained (`basis`), whether it
is exact and, when not, how many records a consumer may see twice; no answer ever makes a
consumer skip a record that was mirrored.

Offsets are only ever written to groups with no active member on the target: a live
consumer would overwrite them, or be overwritten, and both lose track of what was read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import grpc
from aiokafka import TopicPartition

from mirrorline.checkpointer.flow import FlowCheckpointer, TopicPartitionKey
from mirrorline.core.bounds import MAX_FAILOVER_GROUPS
from mirrorline.core.failover import (
    FlowPartition,
    GroupPartition,
    GroupReadiness,
    flow_readiness,
    group_readiness,
)
from mirrorline.core.fencing import foreign_groups
from mirrorline.core.translation import Translation
from mirrorline.kafka.groups import GroupInUse, GroupState
from mirrorline.kafka.progress import read_progress
from mirrorline.kafka.timeindex import TimeIndex
from mirrorline.kafka.watermarks import high_watermarks
from mirrorline.v1 import failover_pb2

log = logging.getLogger(__name__)

#: The longest wait for the source cluster before treating it as unreachable (the flow's
#: `admin.timeout.ms` when shorter).
SOURCE_TIMEOUT_S = 10.0
DEFAULT_DRAIN_TIMEOUT_MS = 60_000
BASIS_CHECKPOINT = "checkpoint"
#: Partitions whose replication lag in milliseconds is measured (one fetch each).
LAG_SAMPLE = 64
#: Group positions translated between two returns to the event loop: a plan of many
#: groups is CPU work, and health checks and other calls must still be answered.
YIELD_EVERY = 256


class Refused(Exception):
    """The request cannot be carried out; `code` is the gRPC status to answer with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Position:
    """Where one group is on one partition, and where that is on the target."""

    topic: str
    partition: int
    target_topic: str
    committed: int           # on the source (from a checkpoint when the source is down)
    metadata: str
    translation: Translation | None
    why_untranslated: str = ""

    @property
    def key(self) -> TopicPartitionKey:
        return (self.topic, self.partition)

    def to_proto(self) -> failover_pb2.OffsetTranslation:
        t = self.translation
        return failover_pb2.OffsetTranslation(
            topic=self.topic, partition=self.partition, target_topic=self.target_topic,
            source_offset=self.committed,
            target_offset=-1 if t is None else t.downstream_offset,
            exact=t is not None and t.exact,
            max_duplicates=-1 if t is None else t.max_duplicates,
            basis=self.why_untranslated if t is None else t.basis)


class FlowFailover:
    """Failover operations on one flow, served by the checkpointer that checkpoints it.

    `deadline` (a `time.monotonic()` value) is the caller's: work stops with
    DEADLINE_EXCEEDED once it has passed, since nobody waits for the answer any more.
    """

    def __init__(self, checkpointer: FlowCheckpointer, *, deadline: float | None = None
                 ) -> None:
        self.cp = checkpointer
        self.warnings: list[str] = []
        self.source_timeout_s = min(SOURCE_TIMEOUT_S, checkpointer.flow.admin_timeout_ms / 1000)
        self.deadline = deadline
        self._work = 0

    async def pace(self, done: int = 1) -> None:
        """Count `done` units of work; every `YIELD_EVERY` return to the event loop (so a
        cancelled call stops there) and check the caller's deadline."""
        self._work += done
        if self._work < YIELD_EVERY:
            return
        self._work = 0
        await asyncio.sleep(0)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise Refused(grpc.StatusCode.DEADLINE_EXCEEDED,
                          "the caller's deadline passed; the work was stopped")

    @staticmethod
    def bound(groups: Sequence[str], *, named: bool = True) -> None:
        """At most `MAX_FAILOVER_GROUPS` groups per call (INVALID_ARGUMENT beyond)."""
        if len(groups) > MAX_FAILOVER_GROUPS:
            how = ("names" if named else "covers (no group named: all of the flow's)")
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                          f"groups: the call {how} {len(groups)} groups; at most "
                          f"{MAX_FAILOVER_GROUPS} per call: split them over several calls")

    # -- what the clusters say ----------------------------------------------------------------
    async def source_ends(self) -> dict[TopicPartitionKey, int] | None:
        """Log end of every replicated source partition; None when the source is down."""
        try:
            partitions = await asyncio.wait_for(self.cp.replicated_partitions(),
                                                self.source_timeout_s)
            ends = await asyncio.wait_for(
                high_watermarks(self.cp.source_consumer, sorted({t for t, _ in partitions}),
                                timeout=self.source_timeout_s), self.source_timeout_s * 2)
        except Exception as exc:  # any failure means "unreachable" here
            log.info("%s: source cluster unreachable: %r", self.cp.name, exc)
            return None
        missing = [tp for tp in partitions if TopicPartition(*tp) not in ends]
        if missing:
            log.info("%s: no log end for %d source partitions", self.cp.name, len(missing))
            return None
        return {(tp.topic, tp.partition): end for tp, end in ends.items()}

    async def replicated(self) -> dict[TopicPartitionKey, int]:
        """Where replication has reached per source partition: the live offset map, and the
        replicator's progress records for partitions the map has no history of."""
        found: dict[TopicPartitionKey, int] = {}
        try:
            found.update(await read_progress(self.cp.target_consumer, self.cp.flow.source))
        except Exception as exc:  # the map alone still answers
            log.info("%s: progress unreadable: %r", self.cp.name, exc)
        offset_map = self.cp.translator.map
        for key in offset_map.partitions():
            mapped = offset_map.mapped_until(*key)
            if mapped is not None:
                found[key] = mapped
        return found

    async def positions(self, group: str, ends: Mapping[TopicPartitionKey, int] | None
                        ) -> list[Position]:
        """The group's positions: committed offsets read from the source when it answers
        (`ends` is not None), else its last checkpoints."""
        cp = self.cp
        out: list[Position] = []
        if ends is not None:
            try:
                committed = await asyncio.wait_for(
                    cp.source_groups.committed(group, sorted(ends)), self.source_timeout_s)
            except Exception as exc:
                raise Refused(grpc.StatusCode.UNAVAILABLE,
                              f"cannot read the offsets of group {group!r} on "
                              f"{cp.flow.source!r}: {exc!r}") from exc
            for (topic, partition), (offset, metadata) in sorted(committed.items()):
                out.append(self._position(topic, partition, offset, metadata))
                await self.pace()
            return out
        for (remote, partition), checkpoint in sorted(cp.store.for_group(group).items()):
            await self.pace()
            topic = cp.source_topic(remote)
            position = self._position(topic, partition, checkpoint.upstream_offset,
                                      checkpoint.metadata)
            if position.translation is None:  # the checkpoint's own answer, unqualified
                position = dataclasses.replace(position, translation=Translation(
                    checkpoint.upstream_offset, checkpoint.downstream_offset, False, -1,
                    BASIS_CHECKPOINT), why_untranslated="")
            out.append(position)
        return out

    def _position(self, topic: str, partition: int, offset: int, metadata: str) -> Position:
        translator = self.cp.translator
        found = translator.translate(topic, partition, offset)
        return Position(topic, partition, self.cp.rename(topic), offset, metadata, found,
                        "" if found else translator.why_not(topic, partition, offset))

    async def active(self, groups: Iterable[str]) -> dict[str, GroupState]:
        """Groups someone may be consuming on the target (members, rebalancing, unknown)."""
        states = await self.cp.target_groups.describe(groups)
        return {g: s for g, s in states.items() if s.active}

    def refuse_foreign(self, groups: Sequence[str]) -> None:
        """Only groups the flow's group filter covers may be committed (core.fencing)."""
        foreign = foreign_groups(groups, self.cp.group_filter)
        if foreign:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                          f"groups: {', '.join(foreign)} not covered by the groups filter of "
                          f"flow {self.cp.name}; a failover commits only the flow's groups")

    async def refuse_active(self, groups: Sequence[str]) -> None:
        active = await self.active(groups)
        if active:
            names = ", ".join(f"{g} ({s.members} member{'s' if s.members != 1 else ''}, "
                              f"{s.state})" for g, s in sorted(active.items()))
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION,
                          f"groups with active members on {self.cp.flow.target!r}: {names}; "
                          "stop their consumers there first (nothing was committed)")

    # -- operations ---------------------------------------------------------------------------
    async def translate(self, group: str) -> failover_pb2.TranslateOffsetsResponse:
        ends = await self.source_ends()
        reply = failover_pb2.TranslateOffsetsResponse(flow=self.cp.name, group=group)
        reply.partitions.extend(p.to_proto() for p in await self.positions(group, ends))
        return reply

    async def plan(self, groups: Sequence[str]) -> failover_pb2.FailoverPlan:
        cp = self.cp
        self.bound(groups)
        chosen = list(groups) or sorted(set(cp.groups) | set(cp.store.groups()))
        self.bound(chosen, named=bool(groups))
        ends = await self.source_ends()
        replicated = await self.replicated()
        members = {g: max(1, s.members) for g, s in (await self.active(chosen)).items()}
        now_ms = int(time.time() * 1000)
        readiness: list[GroupReadiness] = []
        details: list[list[Position]] = []
        for group in chosen:
            positions = await self.positions(group, ends)
            found = group_readiness(
                group,
                [GroupPartition(p.topic, p.partition, p.target_topic, p.committed,
                                None if ends is None else ends.get(p.key),
                                replicated.get(p.key), p.translation, p.why_untranslated)
                 for p in positions],
                newest_checkpoint_ms=cp.last_checkpoint_ms.get(group),
                active_members=members.get(group, 0), now_ms=now_ms)
            if not positions:
                where = (f"on {cp.flow.source!r}" if ends is not None
                         else "in the checkpoints (the source is unreachable)")
                found = dataclasses.replace(found, safe=False, reasons=[
                    *found.reasons, f"group has no committed offset on this flow's topics "
                    f"{where}"])
            readiness.append(found)
            details.append(positions)
            await self.pace(1 + len(positions))
        flow_parts = ([FlowPartition(t, p, end, replicated.get((t, p)))
                       for (t, p), end in sorted(ends.items())] if ends is not None else
                      [FlowPartition(t, p, None, m) for (t, p), m in sorted(replicated.items())])
        flow_parts = await self._with_lag_ms(flow_parts, now_ms)
        summary = flow_readiness(cp.name, flow_parts, readiness)
        plan = failover_pb2.FailoverPlan(
            flow=cp.name, safe=summary.safe, replication_lag_records=summary.lag_records,
            replication_lag_ms=summary.lag_ms, source_reachable=summary.source_reachable)
        for r, positions in zip(readiness, details, strict=True):
            plan.groups.append(failover_pb2.GroupReadiness(
                group=r.group, safe=r.safe, reasons=r.reasons,
                expected_duplicates=r.expected_duplicates,
                records_not_mirrored=r.records_not_mirrored,
                checkpoint_age_ms=-1 if r.checkpoint_age_ms is None else r.checkpoint_age_ms,
                active_members_on_target=r.active_members,
                partitions=[p.to_proto() for p in positions]))
            await self.pace(1 + len(positions))
        return plan

    async def _with_lag_ms(self, parts: list[FlowPartition], now_ms: int
                           ) -> list[FlowPartition]:
        """Lag in ms of lagging partitions: the age of the oldest record not mirrored yet."""
        lagging = [p for p in parts if p.lag_records > 0][:LAG_SAMPLE]
        if not lagging:
            return parts
        ages: dict[TopicPartitionKey, float] = {}
        try:
            async with TimeIndex(self.cp.source_consumer) as index:
                for p in lagging:
                    ts = await asyncio.wait_for(
                        index.timestamp_at(TopicPartition(p.topic, p.partition),
                                           p.replicated or 0), self.source_timeout_s)
                    if ts is not None:
                        ages[(p.topic, p.partition)] = float(max(0, now_ms - ts))
        except Exception as exc:  # the lag in records still stands
            log.info("%s: lag in ms unknown: %r", self.cp.name, exc)
        return [dataclasses.replace(p, lag_ms=ages.get((p.topic, p.partition)))
                for p in parts]

    async def execute(self, groups: Sequence[str], mode: int, drain_timeout_ms: int
                      ) -> failover_pb2.FailoverResult:
        if not groups:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "groups: name at least one group")
        if mode not in (failover_pb2.FAILOVER_MODE_DRAIN, failover_pb2.FAILOVER_MODE_NOW):
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                          "mode: must be FAILOVER_MODE_DRAIN or FAILOVER_MODE_NOW")
        if drain_timeout_ms < 0:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                          f"drain_timeout_ms: must not be negative (got {drain_timeout_ms})")
        self.bound(groups)
        self.refuse_foreign(groups)
        await self.refuse_active(groups)
        ends = await self.source_ends()
        if mode == failover_pb2.FAILOVER_MODE_DRAIN:
            if ends is None:
                raise Refused(grpc.StatusCode.FAILED_PRECONDITION,
                              f"the source cluster {self.cp.flow.source!r} is unreachable, so "
                              "a planned (drain) failover cannot see what is left to mirror; "
                              "use mode now for an unplanned failover")
            await self._drain(groups, ends, (drain_timeout_ms or DEFAULT_DRAIN_TIMEOUT_MS)
                              / 1000)
        elif ends is None:
            self.warnings.append(
                f"the source cluster {self.cp.flow.source!r} is unreachable: groups resume "
                "from their last checkpoints; what they consumed after those is seen again, "
                "and records not mirrored before the outage are not on the target")
        chosen: dict[str, list[Position]] = {}
        for group in groups:
            positions = await self.positions(group, ends)
            if not positions:
                raise Refused(grpc.StatusCode.FAILED_PRECONDITION,
                              f"group {group!r} has no committed offset on the topics of flow "
                              f"{self.cp.name} (nor a checkpoint); nothing to fail over")
            chosen[group] = positions
        await self.refuse_active(groups)  # again: the drain may have taken a while
        return await self._commit(chosen)

    async def _drain(self, groups: Sequence[str], ends: Mapping[TopicPartitionKey, int],
                     timeout_s: float) -> None:
        """Wait until every record of the groups' topics that the source held when the
        failover began is on the target."""
        topics: set[str] = set()
        for group in groups:
            topics.update(p.topic for p in await self.positions(group, ends))
        wanted = {tp: end for tp, end in ends.items() if tp[0] in topics}
        deadline = time.monotonic() + timeout_s
        while True:
            replicated = await self.replicated()
            behind = {tp: end - replicated.get(tp, 0) for tp, end in wanted.items()
                      if replicated.get(tp, 0) < end}
            if not behind:
                return
            if time.monotonic() >= deadline:
                listed = ", ".join(f"{t}-{p}: {n}" for (t, p), n in sorted(behind.items())[:10])
                raise Refused(grpc.StatusCode.DEADLINE_EXCEEDED,
                              f"the drain did not finish within {timeout_s:.0f}s: "
                              f"{sum(behind.values())} records still not mirrored ({listed}); "
                              "nothing was committed -- is the flow running?")
            await asyncio.sleep(0.5)

    async def to_time(self, groups: Sequence[str], timestamp_ms: int
                      ) -> failover_pb2.FailoverResult:
        if not groups:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "groups: name at least one group")
        if timestamp_ms < 0:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                          f"timestamp_ms: must not be negative (got {timestamp_ms})")
        self.bound(groups)
        self.refuse_foreign(groups)
        await self.refuse_active(groups)
        remote = await self.remote_partitions()
        if not remote:
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION,
                          f"flow {self.cp.name} has no mirrored topic on "
                          f"{self.cp.flow.target!r} yet")
        starts: list[Position] = []
        searched: list[str] = []
        async with TimeIndex(self.cp.target_consumer) as index:
            for topic, partition in remote:
                answer = await index.first_at_or_after(TopicPartition(topic, partition),
                                                       timestamp_ms)
                if not answer.basis.startswith("the broker"):
                    searched.append(f"{topic}-{partition}")
                starts.append(Position(topic, partition, topic, -1, "", Translation(
                    -1, answer.offset, True, 0, f"first record at or after the time, from "
                    f"{answer.basis}")))
        if searched:
            self.warnings.append(
                f"the target's time index gave wrong answers for {len(searched)} partitions "
                f"({', '.join(searched[:5])}{', ...' if len(searched) > 5 else ''}); their "
                "offsets were found by reading the records")
        return await self._commit({g: starts for g in groups}, remote=True)

    async def remote_partitions(self) -> list[TopicPartitionKey]:
        """The partitions of the flow's topics on the target."""
        cp = self.cp
        out: list[TopicPartitionKey] = []
        for topic, count in sorted((await cp.target_admin.topic_partitions()).items()):
            source = cp.source_topic(topic)
            if cp.rename(source) == topic and cp.topic_filter.accepts(source) \
                    and not cp.policy.is_internal_topic(topic):
                out.extend((topic, p) for p in range(count))
        return out

    async def _commit(self, chosen: Mapping[str, list[Position]], *, remote: bool = False
                      ) -> failover_pb2.FailoverResult:
        result = failover_pb2.FailoverResult(flow=self.cp.name)
        for group, positions in chosen.items():
            offsets: dict[TopicPartitionKey, tuple[int, str]] = {}
            for p in positions:
                t = p.translation
                if t is None:
                    self.warnings.append(f"group {group}: {p.why_untranslated}; not committed "
                                         "(its consumers start per auto.offset.reset)")
                    continue
                offsets[(p.target_topic, p.partition)] = (t.downstream_offset, p.metadata)
                result.committed.append(failover_pb2.CommittedOffset(
                    group=group, target_topic=p.target_topic, partition=p.partition,
                    offset=t.downstream_offset, exact=t.exact,
                    max_duplicates=t.max_duplicates, basis=t.basis))
                if not remote and not t.exact:
                    bound = ("an unknown number of records" if t.max_duplicates < 0
                             else f"up to {t.max_duplicates} records")
                    self.warnings.append(f"group {group}: {p.topic}-{p.partition}: {bound} "
                                         f"may be seen twice ({t.basis})")
            try:
                await self.cp.target_groups.commit(group, offsets)
            except GroupInUse as exc:
                raise Refused(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from exc
            log.info("%s: failed over group %s: %d partitions committed on %s", self.cp.name,
                     group, len(offsets), self.cp.flow.target)
        result.warnings.extend(self.warnings)
        return result
