"""Checkpoints for one flow: MM2's checkpoint records and (optionally) group-offset sync.

Every `emit.checkpoints.interval.seconds`, each known group's committed source offsets are
translated and written to `<source>.checkpoints.internal` on the target in MM2's format,
never going backwards per group and partition unless the group itself was rewound. The
groups are the source's groups accepted by `groups`/`groups.exclude` with a committed
offset on a replicated topic, refreshed every `refresh.groups.interval.seconds`.

With `sync.group.offsets.enabled`, the translated offsets are also committed to the same
groups on the target -- only for groups nobody consumes from there, and never moving a
committed offset backwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaProducer

from mirrorline.checkpointer.translator import FlowTranslator
from mirrorline.core.checkpoints import (
    CheckpointStore,
    compute_checkpoints,
    plan_group_offset_sync,
)
from mirrorline.core.filters import GroupFilter, TopicFilter
from mirrorline.core.policy import checkpoint_topic_name, make_policy
from mirrorline.core.settings import FlowSettings
from mirrorline.core.stats import SampledStat
from mirrorline.core.wire import Checkpoint
from mirrorline.kafka.admin import ClusterAdmin, TopicSpec
from mirrorline.kafka.causes import explain
from mirrorline.kafka.groups import GroupInUse, GroupOffsets
from mirrorline.kafka.reader import read_topic

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]


class FlowCheckpointer:
    def __init__(self, flow: FlowSettings, *, source_admin: ClusterAdmin,
                 target_admin: ClusterAdmin, producer_kwargs: Mapping[str, Any],
                 source_consumer: Mapping[str, Any], target_consumer: Mapping[str, Any]) -> None:
        self.flow = flow
        self.policy = make_policy(flow.policy, flow.naming_source)
        self.source_groups = GroupOffsets(source_admin)
        self.target_groups = GroupOffsets(target_admin)
        self._source_admin = source_admin
        self._target_admin = target_admin
        self._producer = AIOKafkaProducer(**dict(producer_kwargs, acks="all"))
        self.source_consumer = source_consumer
        self.target_consumer = target_consumer
        self.translator = FlowTranslator(flow, self.policy, source_consumer=source_consumer,
                                         target_consumer=target_consumer)
        self.topic_filter = TopicFilter(flow.topics, flow.topics_exclude)
        self.group_filter = GroupFilter(flow.groups, flow.groups_exclude)
        self.checkpoints_topic = self.policy.checkpoints_topic(flow.naming_source)
        self.store = CheckpointStore()
        self.groups: set[str] = set()
        #: group -> wall-clock ms of its newest checkpoint (for failover plans)
        self.last_checkpoint_ms: dict[str, int] = {}
        self.latency = SampledStat()
        self.error: str | None = None
        #: Checkpoint rounds that failed or waited for an unreachable source (a metric).
        self.failed_rounds = 0
        #: Wall-clock ms at the end of the last round that brought every group's
        #: checkpoint up to date (written, or confirmed unchanged); None before the first.
        self.current_ms: int | None = None
        #: group -> committed partitions of the flow its last round could not translate
        #: (no offset sync yet, or the offset is older than the oldest sync): a metric.
        self.unmapped: dict[str, int] = {}
        #: Why the source cannot be reached, while the flow's runner knows it cannot
        #: (it says so itself, once): rounds wait instead of failing every interval.
        self.source_down: str | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def name(self) -> str:
        return self.flow.name

    @property
    def target_admin(self) -> ClusterAdmin:
        return self._target_admin

    def set_source_admin(self, admin: ClusterAdmin) -> None:
        """The source answers again (it was down when the flow started)."""
        self._source_admin = admin
        self.source_groups = GroupOffsets(admin)

    def rename(self, topic: str) -> str:
        return checkpoint_topic_name(self.policy, topic, source_alias=self.flow.naming_source,
                                     target_alias=self.flow.naming_target)

    # -- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        await self._target_admin.ensure_topic(TopicSpec(
            self.checkpoints_topic, 1, self.flow.checkpoints_topic_replication_factor,
            {"cleanup.policy": "compact"}))
        await self._producer.start()
        loaded = await self._load_checkpoints()
        self.translator.start(checkpoints_loaded=loaded)
        if self.flow.emit_checkpoints_enabled:
            self._tasks.append(asyncio.create_task(self._emit_loop(),
                                                   name=f"{self.name} checkpoints"))
        if self.flow.sync_group_offsets_enabled:
            self._tasks.append(asyncio.create_task(self._sync_loop(),
                                                   name=f"{self.name} group sync"))
        log.info("%s: checkpointing to %s", self.name, self.checkpoints_topic)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.translator.stop()
        with contextlib.suppress(Exception):
            await self._producer.stop()

    async def _load_checkpoints(self) -> bool:
        """Earlier checkpoints, so none goes backwards across a restart (MM2's reload)."""
        try:
            records = await read_topic(self.target_consumer, self.checkpoints_topic,
                                       partitions=1)
        except Exception as exc:  # MM2's rule: fall back to must-read-to-end
            log.warning("%s: cannot read %s (%r); offsets older than the newest sync will not "
                        "be translated until new ones arrive", self.name,
                        self.checkpoints_topic, exc)
            return False
        good: list[Checkpoint] = []
        for record in records:
            checkpoint = self.translator.bad_records.decode(
                record.topic, record.partition, record.offset,
                functools.partial(_valid_checkpoint, record.key, record.value))
            if checkpoint is None:
                continue
            good.append(checkpoint)
            # the age of each group's newest checkpoint, for plans
            self.last_checkpoint_ms[checkpoint.group] = max(
                self.last_checkpoint_ms.get(checkpoint.group, 0), record.timestamp)
        self.store.load(good)
        return True

    # -- which groups, which partitions -----------------------------------------------------
    async def replicated_partitions(self) -> list[TopicPartitionKey]:
        """Source partitions of the topics this flow replicates (the checkpoint side uses
        the topic filter only, as MM2 does)."""
        topics = await self._source_admin.topic_partitions()
        return [(t, p) for t, n in sorted(topics.items()) if self.topic_filter.accepts(t)
                for p in range(n)]

    async def refresh_groups(self) -> None:
        partitions = await self.replicated_partitions()
        found = set()
        for group in await self.source_groups.list_groups():
            if not self.group_filter.accepts(group):
                continue
            if await self.source_groups.committed(group, partitions):
                found.add(group)
        if found != self.groups:
            log.info("%s: checkpointing %d groups (+%d, -%d)", self.name, len(found),
                     len(found - self.groups), len(self.groups - found))
        self.groups = found

    # -- checkpoints ------------------------------------------------------------------------
    async def _emit_loop(self) -> None:
        refreshed = float("-inf")
        while True:
            if self.source_down is not None:
                self.error = f"checkpointing waits for the source: {self.source_down}"
                self.failed_rounds += 1
                await asyncio.sleep(self.flow.emit_checkpoints_interval_s)
                continue
            try:
                # refresh.groups.enabled = false: groups are found once, at start (as MM2's
                # checkpoint connector loads them once and schedules no refresh).
                if refreshed == float("-inf") or (self.flow.refresh_groups_enabled and (
                        time.monotonic() - refreshed >= self.flow.refresh_groups_interval_s
                        or not self.groups)):
                    await self.refresh_groups()
                    refreshed = time.monotonic()
                if self.translator.ready:
                    await self.emit_once()
                    self.current_ms = int(time.time() * 1000)
                self.error = None
            except Exception as exc:  # log (once per cause) and keep the schedule
                servers = [self.flow.clients.source_admin.get("bootstrap.servers", ""),
                           self.flow.clients.target_admin.get("bootstrap.servers", "")]
                error = f"checkpointing failed: {explain(exc, ','.join(servers))}"
                if error != self.error:
                    log.warning("%s: %s", self.name, error)
                self.error = error
                self.failed_rounds += 1
            await asyncio.sleep(self.flow.emit_checkpoints_interval_s)

    async def emit_once(self) -> int:
        """Write the checkpoints that are due for every group; returns how many."""
        partitions = await self.replicated_partitions()
        written = 0
        for group in sorted(self.groups):
            listed_ms = int(time.time() * 1000)
            committed = await self.source_groups.committed(group, partitions)
            untranslated = [0]

            def translate(topic: str, partition: int, upstream: int,
                          untranslated: list[int] = untranslated) -> int | None:
                offset = self.translator.checkpoint_offset(topic, partition, upstream)
                if offset is None or offset < 0:
                    untranslated[0] += 1
                return offset
            try:
                checkpoints = compute_checkpoints(
                    group, dict(committed), translate=translate,
                    rename=self.rename, accepts_topic=self.topic_filter.accepts,
                    store=self.store)
            except ValueError as exc:  # two source topics renamed onto one remote partition
                log.warning("%s: group %s skipped: %s", self.name, group, exc)
                continue
            self.unmapped[group] = untranslated[0]
            if not checkpoints:
                continue
            self.store.update(checkpoints)
            await self._write(checkpoints, listed_ms)
            self.last_checkpoint_ms[group] = listed_ms
            written += len(checkpoints)
        return written

    async def _write(self, checkpoints: list[Checkpoint], listed_ms: int) -> None:
        futures = [await self._producer.send(self.checkpoints_topic, key=c.encode_key(),
                                             value=c.encode_value(), partition=0,
                                             timestamp_ms=listed_ms)
                   for c in checkpoints]
        await asyncio.gather(*futures)
        now_ms = time.time() * 1000
        self.latency.record(now_ms / 1000, count=1, total=now_ms - listed_ms,
                            minimum=now_ms - listed_ms, maximum=now_ms - listed_ms,
                            last=now_ms - listed_ms)

    # -- group-offset sync ------------------------------------------------------------------
    async def _sync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flow.sync_group_offsets_interval_s)
            try:
                await self.sync_group_offsets()
            except Exception as exc:
                log.warning("%s: group offset sync failed: %r", self.name, exc)

    async def sync_group_offsets(self) -> dict[str, dict[TopicPartitionKey, tuple[int, str]]]:
        """Commit translated offsets to idle target groups; returns what was written."""
        groups = self.store.groups()
        states = await self.target_groups.describe(groups)
        written: dict[str, dict[TopicPartitionKey, tuple[int, str]]] = {}
        for group in groups:
            state = states.get(group)
            if state is not None and state.active:
                log.debug("%s: group %s is active on %s; not synced", self.name, group,
                          self.flow.target)
                continue
            checkpoints = self.store.for_group(group)
            # Always compare with what the target holds, whatever its group state says, so
            # a committed offset can never move backwards.
            current = await self.target_groups.committed(group, list(checkpoints))
            plan = plan_group_offset_sync(
                checkpoints, {tp: current[tp][0] if tp in current else None
                              for tp in checkpoints})
            if not plan:
                continue
            try:
                await self.target_groups.commit(group, plan)
            except GroupInUse as exc:
                log.info("%s: %s", self.name, exc)
                continue
            written[group] = plan
        return written

    def source_topic(self, downstream: str) -> str:
        """The source topic a remote topic of this flow was mirrored from (for checkpoints,
        which name the remote topic, when the source cannot be asked)."""
        for topic in {t for t, _ in self.translator.map.partitions()}:
            if self.rename(topic) == downstream:
                return topic
        upstream = self.policy.upstream_topic(downstream)
        if upstream is not None and self.rename(upstream) == downstream:
            return upstream
        return downstream


def _valid_checkpoint(key: bytes | None, value: bytes | None) -> Checkpoint:
    """A checkpoint that decodes but cannot be true is as bad as one that does not."""
    checkpoint = Checkpoint.decode(key, value)
    if (checkpoint.partition < 0 or checkpoint.upstream_offset < 0
            or checkpoint.downstream_offset < 0):
        raise ValueError(f"impossible checkpoint {checkpoint}")
    return checkpoint
