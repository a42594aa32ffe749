"""Where the partitions an owner takes on start: the one resume decision for every owner.

Every component that starts copying a partition -- the replicator at process start and on
a hand-over between workers, the Spark executor on a hand-over to or from it -- asks a
`StartPlanner` (one per flow, kept for the owner's life so the offset map is read
incrementally). It gathers the exactly mapped points (the offset map, the newest offset
syncs), lets `mirrorline.kafka.resume` match the target's tails against the source (from
the remote partition's start where nothing maps it yet), and applies `auto.offset.reset`
where nothing is known.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from mirrorline.core.bad_records import BadRecords
from mirrorline.core.settings import FlowSettings
from mirrorline.core.tail_match import ResumePoint, Verdict
from mirrorline.core.unmapped_tail import starts_at_source_start
from mirrorline.core.wire import OffsetSync
from mirrorline.kafka.flowclients import FlowClients
from mirrorline.kafka.offset_map_reader import OffsetMapFollower
from mirrorline.kafka.resume import log_resume_point, resume_points
from mirrorline.kafka.sync_tail import newest_syncs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Start:
    offset: int
    point: ResumePoint


class StartPlanner:
    def __init__(self, flow: str, *, consumer: AIOKafkaConsumer,
                 source_consumer: Mapping[str, Any], target_consumer: Mapping[str, Any],
                 map_topic: str, reset: str,
                 syncs: tuple[str, Mapping[str, Any]] | None = None,
                 match_tail: bool = True) -> None:
        """`syncs`: the offset-syncs topic and the consumer settings of its cluster;
        `match_tail` False: durable progress alone (`mirrorline.resume.tail.match`)."""
        self.flow = flow
        self._match_tail = match_tail
        self._syncs = syncs
        self._consumer = consumer
        self._source = dict(source_consumer)
        self._target = dict(target_consumer)
        self._follower = OffsetMapFollower(target_consumer, map_topic)
        self._bad_syncs = BadRecords(f"{flow} (newest offset syncs)")
        self._reset = reset

    @classmethod
    def for_flow(cls, flow: FlowSettings, clients: FlowClients, *, name: str,
                 map_topic: str, exact_progress: bool = False) -> StartPlanner:
        """The planner of `flow` as every owner builds it: the flow's offset-syncs topic on
        its cluster, its reset policy and tail matching (`exact_progress`: progress was
        committed with the records, so there is no tail to match)."""
        syncs = None
        if flow.emit_offset_syncs_enabled:
            syncs = (flow.offset_syncs_topic,
                     clients.source_consumer_kwargs if flow.offset_syncs_at_source
                     else clients.target_consumer_kwargs)
        return cls(name, consumer=clients.consumer,
                   source_consumer=clients.source_consumer_kwargs,
                   target_consumer=clients.target_consumer_kwargs, map_topic=map_topic,
                   reset=flow.auto_offset_reset, syncs=syncs,
                   match_tail=flow.resume_tail_match and not exact_progress)

    async def starts(self, partitions: Mapping[TopicPartition, str],
                     progress: Mapping[tuple[str, int], int]) -> dict[TopicPartition, Start]:
        """Start offset and decision of every partition in `partitions` (-> remote topic)."""
        if not partitions:
            return {}
        if not self._match_tail:
            return await self._from_progress(partitions, progress)
        started = time.monotonic()
        _, newest = await asyncio.gather(self._refresh_map(), self._newest_syncs())
        read_at = time.monotonic()
        points = await resume_points(source_consumer=self._source,
                                     target_consumer=self._target,
                                     offset_map=self._follower.map, partitions=partitions,
                                     progress=progress, offset_syncs=newest,
                                     reset=self._reset)
        log.info("%s: start offsets of %d partitions from the target's tails in %.2fs "
                 "(mapped points %.2fs, tails %.2fs; offset syncs of %d partitions in %s)",
                 self.flow, len(partitions), time.monotonic() - started,
                 read_at - started, time.monotonic() - read_at,
                 sum(1 for tp in partitions if (tp.topic, tp.partition) in newest),
                 "no offset-syncs topic" if self._syncs is None else self._syncs[0])
        for point in points.values():
            log_resume_point(self.flow, point)
        return await self._with_reset(points, progress)

    async def _refresh_map(self) -> None:
        try:
            await self._follower.refresh()
        except Exception as exc:  # missing or unreadable map: what is known still counts
            log.warning("%s: reading the offset map %s failed (%r); tails are matched "
                        "from what was read before", self.flow, self._follower.topic, exc)

    async def _newest_syncs(self) -> dict[tuple[str, int], OffsetSync]:
        if self._syncs is None:
            return {}
        topic, kwargs = self._syncs
        try:
            return await newest_syncs(kwargs, topic, bad=self._bad_syncs)
        except Exception as exc:
            log.warning("%s: reading the newest offset syncs from %s failed (%r)",
                        self.flow, topic, exc)
            return {}

    async def _from_progress(self, partitions: Mapping[TopicPartition, str],
                             progress: Mapping[tuple[str, int], int]
                             ) -> dict[TopicPartition, Start]:
        points = {tp: ResumePoint(progress.get((tp.topic, tp.partition)), Verdict.PROGRESS,
                                  "") for tp in partitions}
        return await self._with_reset(points, progress)

    async def _with_reset(self, points: Mapping[TopicPartition, ResumePoint],
                          progress: Mapping[tuple[str, int], int]
                          ) -> dict[TopicPartition, Start]:
        """Apply `auto.offset.reset` where nothing decided a start offset."""
        fresh = [tp for tp, p in points.items() if p.offset is None]
        reset: dict[TopicPartition, int] = {}
        if fresh:
            if starts_at_source_start(self._reset):
                reset = await self._consumer.beginning_offsets(fresh)
            else:
                reset = await self._consumer.end_offsets(fresh)
        out: dict[TopicPartition, Start] = {}
        for tp, point in points.items():
            offset = point.offset if point.offset is not None else reset[tp]
            if point.verdict is Verdict.STOP:
                saved = progress.get((tp.topic, tp.partition))
                offset = saved if saved is not None else offset
            out[tp] = Start(offset, point)
        return out
