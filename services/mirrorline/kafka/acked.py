"""The one bookkeeping path from "the target acknowledged these records" to what is recorded
about them: progress, offset syncs (MM2's rule) and the offset map.

The replicator and the Spark executor both build a `FlowBookkeeping` for each flow they
copy and call `acknowledged` for every run of records the target acknowledged, so both
paths write the same records in the same formats and a partition can move between them
in either direction, each resuming exactly where the other stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from mirrorline.core.offset_syncs import OffsetSyncPlanner
from mirrorline.core.policy import ReplicationPolicy
from mirrorline.core.settings import FlowSettings
from mirrorline.core.topics import OFFSET_MAP_RETENTION_MS
from mirrorline.kafka.admin import TopicSpec
from mirrorline.kafka.bookkeeping import OffsetMapWriter, OffsetSyncSender
from mirrorline.kafka.flowclients import FlowClients
from mirrorline.kafka.progress import ProgressStore

log = logging.getLogger(__name__)


@dataclass
class FlowBookkeeping:
    progress: ProgressStore
    map_writer: OffsetMapWriter
    planner: OffsetSyncPlanner | None = None
    sync_sender: OffsetSyncSender | None = None
    #: Exactly-once mode (`mirrorline.replicator.transactional`): progress and map runs --
    #: and the offset syncs when they live on the target (then `sync_sender` is None) --
    #: were committed in the records' transaction; only source-side syncs remain to write.
    committed_with_records: bool = False

    @classmethod
    async def open(cls, flow: FlowSettings, policy: ReplicationPolicy,
                   clients: FlowClients) -> FlowBookkeeping:
        """Create the internal topics it writes (if missing) and the writers, not started."""
        progress = ProgressStore(source_alias=flow.source,
                                 producer=clients.bookkeeping_producer,
                                 consumer_kwargs=clients.target_consumer_kwargs,
                                 replication_factor=flow.offset_storage_replication_factor)
        await progress.ensure_topic(clients.target_admin)
        planner = sender = None
        if flow.emit_offset_syncs_enabled:
            topic = flow.offset_syncs_topic
            admin = clients.source_admin if flow.offset_syncs_at_source else clients.target_admin
            await admin.ensure_topic(TopicSpec(topic, 1,
                                               flow.offset_syncs_topic_replication_factor,
                                               {"cleanup.policy": "compact"}))
            planner = OffsetSyncPlanner(flow.offset_lag_max)
            sender = OffsetSyncSender(planner, clients.sync_producer, topic)
        map_topic = flow.offset_map_topic
        await clients.target_admin.ensure_topic(TopicSpec(
            map_topic, 1, flow.offset_storage_replication_factor,
            {"cleanup.policy": "delete", "retention.ms": str(OFFSET_MAP_RETENTION_MS)}))
        map_writer = OffsetMapWriter(clients.bookkeeping_producer, map_topic)
        return cls(progress, map_writer, planner, sender)

    def start(self) -> None:
        self.progress.start()
        self.map_writer.start()
        if self.sync_sender is not None:
            self.sync_sender.start()

    def acknowledged(self, topic: str, partition: int, upstream: Sequence[int],
                     downstream_base: int, *, caught_up: bool = False,
                     covered_from: int = -1) -> None:
        """Upstream `upstream` offsets of `topic`-`partition` (increasing) are acknowledged
        at `downstream_base`, `downstream_base + 1`, ... of the remote topic.

        `caught_up`: nothing more to copy right now; publish the exact offset sync at once
        so a consumer group at the end of the topic translates exactly. `covered_from`
        (when >= 0): the source has no record from there to `upstream[0]`.
        """
        if self.committed_with_records:
            if self.planner is not None and self.sync_sender is not None:
                self.planner.queue_batch(topic, partition, upstream, downstream_base)
        else:
            if self.planner is not None:
                self.planner.queue_batch(topic, partition, upstream, downstream_base)
            self.progress.save(topic, partition, upstream[-1] + 1)
            self.map_writer.acknowledged(topic, partition, upstream, downstream_base,
                                         covered_from=covered_from)
        if self.planner is not None and self.sync_sender is not None:
            if caught_up:
                self.planner.promote_delayed()
            self.sync_sender.wake()

    def released(self, topic: str, partition: int, next_offset: int) -> None:
        """A partition let go: its last position becomes durable with the next flush."""
        self.progress.save(topic, partition, next_offset)
        if self.planner is not None:
            self.planner.forget(topic, partition)

    def flush_syncs(self) -> None:
        """Publish delayed offset syncs (every `offset.flush.interval.ms`)."""
        if self.planner is not None and self.sync_sender is not None:
            self.planner.promote_delayed()
            self.sync_sender.wake()

    async def flush(self) -> None:
        """Make every recorded position, sync and map run durable (hand-over, stop)."""
        await self.progress.flush()
        for appender in (self.sync_sender, self.map_writer):
            if appender is not None:
                await appender.flush()

    async def stop(self) -> None:
        await self.progress.stop()
        for appender in (self.sync_sender, self.map_writer):
            if appender is not None:
                await appender.flush()
                await appender.stop()
